"""Framework adapters, each an optional extra: they map a framework's own pause and resume onto
turnlog's, so an agent keeps its framework and gains a durable, exactly-once pause.

- :mod:`turnlog.adapters.langgraph` (``pip install turnlog[langgraph]``): an ``interrupt()``
  becomes a pause; the resumed turn becomes ``Command(resume=...)``.
- :mod:`turnlog.adapters.pydantic_ai` (``pip install turnlog[pydantic-ai]``): deferred tool
  requests become an approval pause; the resumed turn becomes the message history and
  ``DeferredToolResults``.
- :mod:`turnlog.adapters.openai_agents` (``pip install turnlog[openai-agents]``): a run's tool
  approval becomes an approval pause; the resumed turn becomes the input that continues it.
"""
