"""MemoryChain-bsuite at other memory lengths, as `--env benchmarks/studies/memory_chain.py:memory_chain_<N>`: gymnax's
MemoryChain (show a context bit, wait N steps, +1 for answering it, -1 otherwise) with `memory_length` N; the
registered MemoryChain-bsuite is N = 5."""

import gymnax


def _memory_chain(memory_length: int):
    def make(**kwargs):
        env, params = gymnax.make("MemoryChain-bsuite", **kwargs)
        return env, params.replace(memory_length=memory_length)

    return make


memory_chain_20 = _memory_chain(20)
memory_chain_50 = _memory_chain(50)
memory_chain_100 = _memory_chain(100)
