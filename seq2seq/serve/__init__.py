"""`seq2seq serve`: an HTTP server (FastAPI) that batches concurrent requests onto one model."""
