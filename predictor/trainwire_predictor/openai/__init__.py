"""The OpenAI API (completions, chat completions, models): typed requests, a data plane over generation, routes."""
