"""`steer serve`: the model loaded once behind a local HTTP API (`app`) with a page to try rewrites,
requests that arrive together decoded in one batch (`batching`)."""
