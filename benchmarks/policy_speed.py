"""Generation speed of the policies: n samples x ~30 tokens for a ~500-token ETO-style prompt.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/policy_speed.py [--backends transformers,vllm]

Prints one JSON line per backend: set-up seconds, and the seconds of each
repeated call (the first vLLM call warms the prefix cache; later calls of the
same prompt hit it, as SAND's per-step sampling does for the shared ETO head).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def eto_chat(target_tokens: int, count) -> list[dict[str, str]]:
    chat = [
        {"role": "user", "content": "You are playing a text game. Interact with the household to solve a task. "
         "Each turn answer with 'Thought: ...' then 'Action: ...'. Valid actions: look, inventory, "
         "take OBJ, put OBJ in RECEPTACLE, open OBJ, close OBJ, move to ROOM, examine OBJ."},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": "Your task is to find a coin. You are in the kitchen. You see a fridge, "
         "a counter, an oven and a door to the west that is open."},
    ]
    i = 0
    while count(chat) < target_tokens:
        chat += [{"role": "assistant", "content": f"Thought: I should look around the room number {i}.\n"
                  f"Action: examine counter {i}"},
                 {"role": "user", "content": f"Observation: The counter {i} is empty apart from a dusty "
                  "recipe book and a wooden spoon."}]
        i += 1
    return chat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="transformers,vllm")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--prompt-tokens", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vllm-lora-mode", default="adapter",
                    help="adapter: engine started with enable_lora (slower CPU kernels); merge: plain engine")
    ap.add_argument("--vllm-dtype", default="bfloat16", help="bfloat16 is emulated (slow) on CPUs without AVX512-BF16/AMX")
    ap.add_argument("--vllm-bind", default="", help="VLLM_CPU_OMP_THREADS_BIND: '' (vLLM's auto), nobind, 0-1, ...")
    ap.add_argument("--threads", type=int, default=1, help="transformers: torch threads")
    ap.add_argument("--chats", type=int, default=1, help="chats per call (each with n samples)")
    ap.add_argument("--common-prefix", default="off", help="transformers share_common_prefix: off, on, or both "
                    "(both: two rows side by side, the chats differing only in their last observation)")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from sand_framework.plugins import load_plugins
    from sand_framework.types import SamplingParams

    plugins = load_plugins()
    model = plugins.resolve_model("smollm2-135m", os.environ.get("SAND_CACHE", ".sand_cache"))
    tok = AutoTokenizer.from_pretrained(model)

    def count(chat):
        return len(tok(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False),
                       add_special_tokens=False)["input_ids"])

    chat = eto_chat(args.prompt_tokens, count)
    # Stop only at end-of-turn / max tokens, so every backend generates the same lengths.
    sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.tokens, seed=0)
    params = {
        "transformers": {"threads": args.threads, "stop": [], "dtype": "float32",
                         "share_common_prefix": args.common_prefix == "on"},
        "vllm": {"stop": [], "max_model_len": 1024, "kv_cache_space_gb": 1, "lora_mode": args.vllm_lora_mode,
                 "dtype": args.vllm_dtype, "cpu_threads_bind": args.vllm_bind},
    }
    # Chats of one call share the instruction and history and differ in their last observation, like the
    # branches of a rollout depth or the tasks of an evaluation batch.
    chats = [chat[:-1] + [{"role": "user", "content": f"{chat[-1]['content']} You see item number {i}."}]
             for i in range(args.chats)]
    runs = [(b, None) for b in args.backends.split(",")]
    if args.common_prefix == "both":
        runs = [(b, flag) for b in args.backends.split(",") for flag in ((False, True) if b == "transformers" else (None,))]
    for name, flag in runs:
        if flag is not None:
            params["transformers"]["share_common_prefix"] = flag
        pol = plugins.registries().build("policy", name, params.get(name, {}))
        t0 = time.perf_counter()
        pol.setup(model)
        setup_s = time.perf_counter() - t0
        calls = []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            out = pol.generate(chats, SamplingParams(**{**sampling.to_dict(), "seed": r}))
            calls.append(round(time.perf_counter() - t0, 3))
        toks = [c.completion_tokens for c in out[0]]
        print(json.dumps({"backend": name, "params": dict(params.get(name, {})), "prompt_tokens": out[0][0].prompt_tokens, "n": args.n, "chats": args.chats,
                          "completion_tokens": toks, "setup_s": round(setup_s, 2), "call_s": calls,
                          "stats": pol.stats}), flush=True)
        pol.close()


if __name__ == "__main__":
    main()
