"""llama-cpp-python's sampler wrappers on our library: LlamaSampler's chain with a
CustomSampler (a struct in Python memory with only `apply`, added to the chain and removed
before the chain is freed: the way `Llama` applies logits processors), penalties, top-k,
temp and a seeded dist, applied to a ctypes candidate array. Run with LLAMA_CPP_LIB_PATH set.
Prints the picks; run against upstream's library too, the outputs must be equal."""
import ctypes
import sys

import llama_cpp
from llama_cpp._internals import LlamaSampler


def candidates(n, shift):
    arr_t = llama_cpp.llama_token_data * n
    data = arr_t(*[llama_cpp.llama_token_data(i, float((i * 37 + shift) % 11) / 3.0, 0.0) for i in range(n)])
    arr = llama_cpp.llama_token_data_array(data, n, -1, False)
    return data, arr


def main():
    calls = []

    def boost_seven(cur_p):
        calls.append(cur_p.contents.size)
        for i in range(cur_p.contents.size):
            if cur_p.contents.data[i].id == 7:
                cur_p.contents.data[i].logit += 2.0

    picks = []
    for seed in (1, 42):
        s = LlamaSampler()
        s.add_custom(boost_seven)
        s.add_penalties(n_vocab=64, penalty_last_n=16, penalty_repeat=1.2, penalty_freq=0.1, penalty_present=0.1)
        s.add_top_k(20)
        s.add_temp(0.9)
        s.add_dist(seed)
        for step in range(20):
            data, arr = candidates(64, step)
            llama_cpp.llama_sampler_apply(s.sampler, ctypes.byref(arr))
            assert 0 <= arr.selected < arr.size, (arr.selected, arr.size)
            token = arr.data[arr.selected].id
            llama_cpp.llama_sampler_accept(s.sampler, token)
            picks.append(token)
        s.close()  # removes the custom sampler, then frees the chain
    assert len(calls) == 40 and all(c == 64 for c in calls), calls
    greedy = LlamaSampler()
    greedy.add_custom(boost_seven)
    greedy.add_greedy()
    data, arr = candidates(64, 0)
    llama_cpp.llama_sampler_apply(greedy.sampler, ctypes.byref(arr))
    picks.append(arr.data[arr.selected].id)
    greedy.close()
    print("picks", " ".join(map(str, picks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
