"""Shared building blocks of the families' forward passes: activations and fused residual
linears (blocks), rotary positions, declarative weight loading (weights)."""
