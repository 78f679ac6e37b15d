"""HTTP routers, one per resource. Routers validate, call verifiers or the composer, and return."""
