"""vodou_engine: recipes compiled to verified, approval-gated tool graphs."""
