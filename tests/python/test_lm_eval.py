"""lm-evaluation-harness against a real sluice: lm_eval's `local-completions` model scores
a tiny local multiple-choice task (tests/data/lm_eval) through /v1/completions with
`echo` and `logprobs`, counting tokens with sluice's /tokenize (`tokenizer_backend=remote`,
which also needs GET /tokenizer_info), so no Hugging Face tokenizer or hub access.

What lm_eval needs from the server for each (context, continuation) pair: it sends the
token ids of context + continuation (from /tokenize) as `prompt`, a list of id lists
(`batch_size` per request), with `echo: true, logprobs: 1, max_tokens: 1,
temperature: 0, seed: 1234`; and sums `choices[i].logprobs.token_logprobs[ctxlen:-1]`,
ctxlen being the context's token count. So each choice's logprobs must hold one entry
per prompt token (the first null), then exactly one for the generated token (even an
end token), and `top_logprobs` must be a non-empty dict at every scored position.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TASK_DIR = REPO / "tests" / "data" / "lm_eval"
TASK = "sluice_facts"


def documents():
    with open(TASK_DIR / "facts.jsonl") as f:
        return [json.loads(line) for line in f]


# lm_eval's own entry point, `simple_evaluate` (what `lm_eval run` calls), in a child
# process; the TaskManager indexes only tests/data/lm_eval (indexing the ~14k built-in task
# files would take 25 s).
DRIVER = """
import json, sys
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager
task_dir, task, model_args, out = sys.argv[1:]
r = simple_evaluate(
    model="local-completions", model_args=model_args, tasks=[task], batch_size=4, log_samples=True,
    task_manager=TaskManager(include_path=task_dir, include_defaults=False))
with open(out, "w") as f:
    json.dump({"results": r["results"], "n-samples": r["n-samples"], "samples": r["samples"][task],
               "version": r["lm_eval_version"]}, f, default=str)
"""


@pytest.fixture(scope="module")
def lm_eval_run(base_url, model, tmp_path_factory):
    """Runs lm_eval once; returns its results, with the samples sorted by doc_id."""
    out = tmp_path_factory.mktemp("lm_eval")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(out / "hf"))
    env.pop("OPENAI_API_KEY", None)
    model_args = ",".join([
        f"base_url={base_url}/v1/completions",
        f"model={model}",
        "tokenizer_backend=remote",
        "tokenized_requests=True",
        "num_concurrent=2",
        "max_retries=1",
        "timeout=120",
    ])
    cmd = [sys.executable, "-c", DRIVER, str(TASK_DIR), TASK, model_args, str(out / "run.json")]
    # The task's data_files path is relative to the repository root.
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"lm_eval failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    run = json.loads((out / "run.json").read_text())
    run["samples"].sort(key=lambda s: s["doc_id"])
    return run


def pairs_and_loglikelihoods(sample):
    """The (context, continuation) pairs lm_eval scored for one document, and their scores."""
    return [tuple(a) for a in sample["arguments"]], [r[0][0] for r in sample["resps"]]


def test_lm_eval_scores_every_document(lm_eval_run):
    samples = lm_eval_run["samples"]
    docs = documents()
    assert lm_eval_run["n-samples"][TASK] == {"original": len(docs), "effective": len(docs)}
    assert [s["doc_id"] for s in samples] == list(range(len(docs)))
    for s, d in zip(samples, docs):
        pairs, lls = pairs_and_loglikelihoods(s)
        assert [c for _, c in pairs] == [" " + c for c in d["choices"]]
        assert all(ctx == f"Question: {d['question']}\nAnswer:" for ctx, _ in pairs)
        # Log-probabilities of real continuations: finite, at most 0, not all the same.
        assert all(math.isfinite(ll) and ll <= 1e-6 for ll in lls), lls
        assert len(set(lls)) > 1, lls
    r = lm_eval_run["results"][TASK]
    for metric in ("acc,none", "acc_norm,none"):
        assert isinstance(r[metric], float) and 0.0 <= r[metric] <= 1.0
    # acc is the share of documents whose right answer has the highest log-likelihood.
    picks = [max(range(4), key=lambda i: pairs_and_loglikelihoods(s)[1][i]) for s in samples]
    right = [p == d["answer"] for p, d in zip(picks, docs)]
    assert r["acc,none"] == pytest.approx(sum(right) / len(docs))
    print(f"\nlm_eval {lm_eval_run['version']} {TASK}: acc {r['acc,none']:.2f}, acc_norm {r['acc_norm,none']:.2f} over {len(docs)} questions")


def test_lm_eval_loglikelihoods_match_direct_echo_scoring(lm_eval_run, base_url, model):
    """Every number lm_eval got equals the continuation's summed logprobs from one direct
    echo call that scores the text prompt without generating (`max_tokens: 0`), the
    continuation found by `text_offset` rather than by lm_eval's token counting. And the
    echoed logprob of a continuation's first token is the one that generating right after
    the context gives that token (among the top 20), so echo does not shift positions."""
    samples = lm_eval_run["samples"]
    pairs, theirs = [], []
    for s in samples:
        p, lls = pairs_and_loglikelihoods(s)
        pairs += p
        theirs += lls
    ours, firsts = [], []
    for start in range(0, len(pairs), 16):
        batch = pairs[start:start + 16]
        prompts = [ctx + cont for ctx, cont in batch]
        r = httpx.post(base_url + "/v1/completions", timeout=120, json={
            "model": model, "prompt": prompts, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})
        assert r.status_code == 200, r.text
        choices = sorted(r.json()["choices"], key=lambda c: c["index"])
        assert len(choices) == len(batch)
        for (ctx, _), prompt, c in zip(batch, prompts, choices):
            assert c["text"] == prompt
            lp = c["logprobs"]
            n = len(lp["tokens"])
            assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
            assert lp["token_logprobs"][0] is None
            # The data is ASCII, so byte and character offsets agree.
            assert len(ctx) in lp["text_offset"], (ctx, lp["tokens"], lp["text_offset"])
            first = lp["text_offset"].index(len(ctx))
            ours.append(sum(lp["token_logprobs"][first:]))
            firsts.append((ctx, lp["tokens"][first], lp["token_logprobs"][first]))
    assert len(ours) == len(theirs) == 4 * len(samples)
    bad = [(pair, a, b) for pair, a, b in zip(pairs, theirs, ours) if abs(a - b) > 1e-3]
    assert not bad, bad[:5]

    contexts = sorted({ctx for ctx, _ in pairs})
    r = httpx.post(base_url + "/v1/completions", timeout=120, json={
        "model": model, "prompt": contexts, "max_tokens": 1, "logprobs": 20, "temperature": 0,
        "ignore_eos": True})
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    top = {ctx: c["logprobs"]["top_logprobs"][0] for ctx, c in zip(contexts, choices)}
    seen = [(ctx, tok, v, top[ctx][tok]) for ctx, tok, v in firsts if tok in top[ctx]]
    assert seen, "no continuation's first token is among the top 20 after its context"
    bad = [x for x in seen if abs(x[2] - x[3]) > 1e-3]
    assert not bad, bad[:5]
