#!/usr/bin/env python3
"""The Kubernetes fleet checks of scripts/test-deploy (run in the test venv).

  render DIR OUT        Renders the kustomization DIR (resources: files and directories,
                        the subset deploy/kubernetes uses) into OUT.k8s.yaml (built-in
                        kinds) and OUT.crs.yaml (kinds of the CRDs vendored in
                        deploy/kubernetes/crds); when kubectl is on the PATH, checks that
                        `kubectl kustomize DIR` renders the same objects.
  schedule BIN FILE...
                        Over rendered manifests: no ReadWriteOnce claim mounted by a
                        workload that may run more than one pod; the sluice pods' grace
                        above the server's shutdown grace (its default read from
                        `BIN serve --help`) plus the preStop pause; a
                        PodDisruptionBudget that selects them and lets a drain proceed;
                        spread over nodes and zones; the model volume per pod and big
                        enough; the picker's prefix index sized to the KV pool; and the
                        pod security every container keeps.
  env FILE              Prints the sluice container's SLUICE_* settings (not SLUICE_MODEL,
                        which names a path in the pod), one NAME=VALUE a line.
  metrics SCRAPE FILE...
                        Every sluice_* name that deploy/ mentions is a series of SCRAPE
                        (the /metrics of a running server); the picker's three gauges are
                        gauges; KV usage is blocks held / blocks in the pool.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
CRDS = os.path.join(ROOT, "deploy", "kubernetes", "crds")
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "app.kubernetes.io/name"


def die(msg):
    print(f"FAIL {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def kustomize(directory):
    k = yaml.safe_load(open(os.path.join(directory, "kustomization.yaml")))
    extra = set(k) - {"apiVersion", "kind", "resources"}
    if extra or k.get("kind") != "Kustomization":
        die(f"{directory}: {sorted(extra)} not rendered here; extend scripts/check-fleet.py")
    docs = []
    for r in k["resources"]:
        path = os.path.join(directory, r)
        docs += kustomize(path) if os.path.isdir(path) else load(path)
    return docs


def key(d):
    return (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])


def custom_groups():
    return {yaml.safe_load(open(p))["spec"]["group"] for p in glob.glob(os.path.join(CRDS, "*.yaml"))}


def render(directory, out):
    docs = kustomize(directory)
    keys = [key(d) for d in docs]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        die(f"{directory}: rendered twice: {sorted(dupes)}")
    if shutil.which("kubectl"):
        got = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
        if got.returncode:
            die(f"kubectl kustomize {directory}: {got.stderr}")
        canon = lambda ds: sorted(json.dumps(d, sort_keys=True) for d in ds)
        theirs = [d for d in yaml.safe_load_all(got.stdout) if d]
        if canon(theirs) != canon(docs):
            die(f"{directory}: kubectl kustomize renders other objects than scripts/check-fleet.py")
        how = "kubectl kustomize renders the same"
    else:
        how = "kubectl not found, so not compared with kubectl kustomize"
    groups = custom_groups()
    crs = [d for d in docs if d["apiVersion"].split("/")[0] in groups]
    k8s = [d for d in docs if d not in crs]
    for suffix, part in (("k8s", k8s), ("crs", crs)):
        with open(f"{out}.{suffix}.yaml", "w") as f:
            yaml.safe_dump_all(part, f, sort_keys=False)
    print(f"{directory}: {len(k8s)} objects and {len(crs)} custom resources rendered; {how}")


def quantity(q):
    """Bytes of a quantity such as 256Mi, 1G or 1000."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", str(q))
    if not m:
        die(f"quantity {q!r}")
    unit = m.group(2) or ""
    base = 1024 if unit.endswith("i") else 1000
    return float(m.group(1)) * base ** ("KMGT".index(unit[0]) + 1 if unit else 0)


def selects(selector, labels):
    if set(selector) - {"matchLabels"}:
        die(f"selector {selector}: only matchLabels is checked")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def arg(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def server_container(pod):
    cs = [c for c in pod["containers"] if c["name"] == "sluice"]
    if len(cs) != 1:
        die("no container named sluice")
    return cs[0]


def default_grace(binary):
    """--shutdown-grace's default, from the binary's help."""
    text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for block in re.split(r"\n(?=\s*(?:-\w, )?--)", text):
        words = " ".join(block.split())
        if words.startswith("--shutdown-grace "):
            return re.search(r"\[default: ([0-9.]+)\]", words).group(1)
    die(f"no --shutdown-grace in {binary} serve --help")


def schedule(binary, files):
    docs = [d for f in files for d in load(f)]
    objs = {key(d): d for d in docs}
    errs = []
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    sluice = [w for w in workloads if w["metadata"]["name"] == "sluice"]
    if len(sluice) != 1:
        die("no Deployment sluice")

    def scalers(w):
        name = w["metadata"]["name"]
        hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"
                and d["spec"]["scaleTargetRef"]["name"] == name]
        keda = [d for d in docs if d["kind"] == "ScaledObject"
                and d["spec"]["scaleTargetRef"]["name"] == name]
        lo = [h["spec"].get("minReplicas", 1) for h in hpas] + [s["spec"].get("minReplicaCount", 0) for s in keda]
        hi = [h["spec"]["maxReplicas"] for h in hpas] + [s["spec"].get("maxReplicaCount", 100) for s in keda]
        n = w["spec"].get("replicas", 1)
        return (min(lo) if lo else n), max(hi + [n])

    # (a) No ReadWriteOnce claim under a workload that may run more than one pod: its
    # pods on other nodes would stay Pending.
    for w in workloads:
        _, most = scalers(w)
        pod = w["spec"]["template"]["spec"]
        for v in pod.get("volumes", []):
            claim = v.get("persistentVolumeClaim")
            if not claim:
                continue
            pvc = objs.get(("PersistentVolumeClaim", "", claim["claimName"]))
            if pvc is None:
                errs.append(f"{w['metadata']['name']}: claim {claim['claimName']} is not in the manifests")
                continue
            modes = set(pvc["spec"].get("accessModes", []))
            if most > 1 and not modes & {"ReadOnlyMany", "ReadWriteMany"}:
                errs.append(f"{w['metadata']['name']} may run {most} pods on a {sorted(modes)} claim")
    # The model volume: each pod's own, or a claim many nodes may mount.
    dep = sluice[0]
    least, most = scalers(dep)
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    vols = {v["name"]: v for v in pod["volumes"]}
    models = vols.get("models", {})
    if "emptyDir" in models:
        limit = models["emptyDir"].get("sizeLimit")
        path = os.path.join(os.environ.get("SLUICE_MODEL_DIR") or os.path.expanduser("~/.cache/sluice/models"), MODEL)
        if limit is None or (os.path.exists(path) and quantity(limit) < os.path.getsize(path)):
            errs.append(f"the models emptyDir's sizeLimit {limit} does not hold {MODEL}")
    elif not ({"ephemeral", "image", "persistentVolumeClaim"} & set(models)):
        errs.append("the models volume is neither per pod nor a claim")

    # (b) The kubelet's SIGKILL comes after the drain: grace > shutdown grace + preStop.
    server = server_container(pod)
    env = {e["name"]: e.get("value") for e in server.get("env", [])}
    grace = (arg(server.get("args", []), "--shutdown-grace") or env.get("SLUICE_SHUTDOWN_GRACE")
             or default_grace(binary))
    pre = server.get("lifecycle", {}).get("preStop", {})
    pause = 0.0
    if "sleep" in pre:
        pause = float(pre["sleep"]["seconds"])
    elif pre.get("exec", {}).get("command", [""])[0] == "sleep":
        pause = float(pre["exec"]["command"][1])
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if not tgps > float(grace) + pause:
        errs.append(f"terminationGracePeriodSeconds {tgps} <= shutdown grace {grace} + preStop {pause}")

    # (c) A PodDisruptionBudget over these pods that never blocks a drain.
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget" and selects(d["spec"]["selector"], labels)]
    if len(pdbs) != 1:
        errs.append(f"{len(pdbs)} PodDisruptionBudgets select the sluice pods, not 1")
    for p in pdbs:
        s = p["spec"]
        if "maxUnavailable" in s:
            if str(s["maxUnavailable"]) in ("0", "0%"):
                errs.append("the PodDisruptionBudget allows no eviction")
        else:
            keep = str(s.get("minAvailable", 0))
            keep = -(-least * int(keep[:-1]) // 100) if keep.endswith("%") else int(keep)
            if not keep < least:
                errs.append(f"minAvailable {s.get('minAvailable')} blocks drains at {least} replicas")

    # (d) Spread over nodes and zones (or anti-affinity).
    keys = {t["topologyKey"] for t in pod.get("topologySpreadConstraints", [])
            if selects(t["labelSelector"], labels)}
    anti = pod.get("affinity", {}).get("podAntiAffinity")
    for k in ("kubernetes.io/hostname", "topology.kubernetes.io/zone"):
        if k not in keys and not anti:
            errs.append(f"no spread of the sluice pods over {k}")

    # The picker's prefix index holds a pod's KV pool: lruCapacityPerServer blocks of
    # blockSizeTokens = SLUICE_SLOTS x SLUICE_CONTEXT positions (the default pool).
    for cm in (d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "sluice-epp"):
        cfg = yaml.safe_load(next(iter(cm["data"].values())))
        for p in cfg["plugins"]:
            if p["type"] == "approx-prefix-cache-producer":
                par = p["parameters"]
                pool = int(env["SLUICE_SLOTS"]) * int(env["SLUICE_CONTEXT"])
                if "SLUICE_KV_CACHE_TOKENS" in env:
                    pool = int(env["SLUICE_KV_CACHE_TOKENS"])
                if par["lruCapacityPerServer"] * par["blockSizeTokens"] != pool:
                    errs.append(f"the picker's prefix index ({par['lruCapacityPerServer']} x "
                                f"{par['blockSizeTokens']}) is not the KV pool ({pool} positions)")

    # Pod security: every container hardened; the server runs the image's entrypoint with
    # the model read-only, and only the init container fetches it.
    if pod["securityContext"].get("runAsNonRoot") is not True:
        errs.append("pods may run as root")
    if pod["securityContext"].get("seccompProfile", {}).get("type") != "RuntimeDefault":
        errs.append("no RuntimeDefault seccomp")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        if not (sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
                and sc.get("capabilities", {}).get("drop") == ["ALL"]):
            errs.append(f"container {c['name']} is not hardened")
    if "command" in server:
        errs.append("the server container must run the image's entrypoint")
    mounts = [m for m in server["volumeMounts"] if m["name"] == "models"]
    if not mounts or mounts[0].get("readOnly") is not True:
        errs.append("the server mounts the models volume writable")
    if "emptyDir" in models and [c.get("command") for c in pod.get("initContainers", [])] != [["sluice-fetch-model"]]:
        errs.append("the models emptyDir is filled by no sluice-fetch-model init container")
    for e in errs:
        print(f"FAIL {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"fleet: {least} to {most} pods, no ReadWriteOnce claim shared, the model in each pod's "
          f"own volume; grace {tgps} s > {grace} s drain + {pause:g} s preStop; one PDB "
          f"(drains one at a time); spread over {', '.join(sorted(keys))}; pods hardened")


def env_of(path):
    docs = load(path)
    dep = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "sluice"][0]
    for e in server_container(dep["spec"]["template"]["spec"]).get("env", []):
        if e["name"].startswith("SLUICE_") and e["name"] != "SLUICE_MODEL" and "value" in e:
            print(f"{e['name']}={e['value']}")


def metrics(scrape, files):
    text = open(scrape).read()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
            samples.setdefault(m.group(1), []).append(float(m.group(3)))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    named = {}
    for f in files:
        for n in re.findall(r"\bsluice_[a-z0-9_]+", open(f).read()):
            named.setdefault(n, set()).add(os.path.relpath(f, ROOT))
    missing = {n: sorted(fs) for n, fs in named.items()
               if n not in samples and n + "_bucket" not in samples}
    for n, fs in sorted(missing.items()):
        print(f"FAIL {n} (in {', '.join(fs)}) is not exported by the running server", file=sys.stderr)
    errs = bool(missing)
    for g in ("sluice_requests_waiting", "sluice_requests_running", "sluice_kv_cache_usage_ratio"):
        if types.get(g) != "gauge":
            print(f"FAIL {g} is a {types.get(g)}, the picker reads a gauge", file=sys.stderr)
            errs = True
    [ratio], [used], [total] = (samples[n] for n in (
        "sluice_kv_cache_usage_ratio", "sluice_kv_blocks_used", "sluice_kv_blocks_capacity"))
    if not (0 <= ratio <= 1 and total > 0 and abs(ratio - used / total) < 1e-9):
        print(f"FAIL KV usage {ratio} is not blocks held {used} / blocks {total}", file=sys.stderr)
        errs = True
    if errs:
        sys.exit(1)
    print(f"metrics: the {len(named)} sluice_* names in deploy/ are all exported by a running "
          f"server; KV usage = blocks held / blocks in the pool ({used:g}/{total:g})")


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "render":
        render(*rest)
    elif cmd == "schedule":
        schedule(rest[0], rest[1:])
    elif cmd == "env":
        env_of(*rest)
    elif cmd == "metrics":
        metrics(rest[0], rest[1:])
    else:
        die(f"unknown command {cmd}")
