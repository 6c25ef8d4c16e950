"""Jina XLM-RoBERTa with rotary positions (jina-colbert-v2, jina-embeddings-v3)."""
