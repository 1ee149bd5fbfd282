"""The compiler's passes, one module each; ``pipeline.py`` lists them and runs them in order."""
