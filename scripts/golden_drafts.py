"""llama-server's drafts as golden data: one completion of PROMPT at temperature 0 for 256
tokens (its end token ignored where IGNORE_EOS=1) from the server at 127.0.0.1:PORT, whose
debug log LOG gives each draft call's candidates per draft position; written with the
prompt's and the answer's tokens and the completion's timings to OUT. Run by
scripts/gen_mtp_golden.sh and scripts/gen_drafter_golden.sh."""
import json, os, re, urllib.request

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
url = f"http://127.0.0.1:{os.environ['PORT']}"

def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))

prompt = post("/tokenize", {"content": PROMPT})["tokens"]
done = post("/completion", {"prompt": PROMPT, "n_predict": 256, "temperature": 0,
                            "ignore_eos": os.environ.get("IGNORE_EOS") == "1",
                            "return_tokens": True})
cand = re.compile(r"draft candidate +(\d+), pos +(\d+): +(\d+) \( *([0-9.]+)\)")
step = re.compile(r"generate_draft: id=(\d+), #tokens=(\d+), #draft=(\d+)")
call = re.compile(r"called impl \S+, hist size = (\d+)")
# DRAFT_LENGTHS=1: every draft call with its length (a drafter that logs no candidates,
# DFlash 2), those that drafted nothing too.
lengths = os.environ.get("DRAFT_LENGTHS") == "1"
steps, pending, called = [], {}, None
for line in open(os.environ["LOG"], errors="replace"):
    if m := cand.search(line):
        k, pos, tok, p = int(m[1]), int(m[2]), int(m[3]), float(m[4])
        pending.setdefault(pos, []).append([tok, p])
    elif lengths and (m := call.search(line)):
        if called is not None:
            steps.append({"n_past": called, "n_draft": 0, "candidates": []})
        called = int(m[1])
    elif m := step.search(line):
        drafts = [pending[pos] for pos in sorted(pending)]
        steps.append({"n_past": int(m[2]), "id_last": int(m[1]), "candidates": drafts})
        if lengths:
            steps[-1]["n_draft"] = int(m[3])
        pending, called = {}, None
t = done["timings"]
out = {
    "prompt": PROMPT,
    "prompt_tokens": prompt,
    "answer_tokens": done["tokens"],
    "draft_n": t["draft_n"],
    "draft_n_accepted": t["draft_n_accepted"],
    "steps": steps,
}
path = os.environ["OUT"]
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
print(f"{path}: {len(steps)} draft calls, {t['draft_n_accepted']} of {t['draft_n']} accepted")
