"""Framework adapters, each an optional extra: ``pip install mnemo-client[langchain]`` for
:mod:`mnemo_client.integrations.langchain`, ``mnemo-client[llamaindex]`` for
:mod:`mnemo_client.integrations.llamaindex`."""
