"""The application layer, above the loop: running a recipe (runner), evaluating any model (model_eval),
and reusing finished stages across runs (reuse)."""
