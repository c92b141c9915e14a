"""lazyten code generation: kernel ASTs, shape tracking, linearizer and renderers (stdlib only)."""
