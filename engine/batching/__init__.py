"""Batched decoding: many sequences per step, for data generation and offline jobs."""
