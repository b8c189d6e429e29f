"""Torch primitives of support-constrained unlearning (paper Eq. 1): models and geometry, supports,
objectives, training, exact checkpoints, tokenised record sets."""
