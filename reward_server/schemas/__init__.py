"""Request/result models, one module per resource. Batch forms wrap the single forms."""
