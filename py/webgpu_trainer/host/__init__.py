"""What CPython hosts around the engine: the Starlette server, the engine wheel, MNIST shards."""
