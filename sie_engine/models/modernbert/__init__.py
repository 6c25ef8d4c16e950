"""ModernBERT: rotary positions, alternating local / global attention, gated MLP."""
