#!/usr/bin/env python3
"""Checks the endpoint picker of deploy/kubernetes/scale-out/epp.yaml offline against the
release it names: every flag one the picker defines (none of those it refuses), booleans
written --flag=value, the config file the one its ConfigMap mounts, and that config
strict like the picker's own decoding (unknown fields, plugin types or parameters are
errors; pluginRefs name configured plugins; the default engine is configured). Also
proves it can fail: broken copies must be refused.

The tables are llm-d-router v0.10.0's, read from its source at that tag:
  FLAGS           pkg/epp/server/options.go (AddFlags),
                  pkg/common/observability/logging/options.go (-v and zap's flags)
  REFUSED_FLAGS   pkg/epp/server/options.go (deprecatedMetricFlags, refused in Validate)
  CONFIG_FIELDS   apix/config/v1alpha1/endpointpickerconfig_types.go
  PARAMETERS      the factories of each plugin type (decoded with DisallowUnknownFields,
                  pkg/epp/framework/interface/plugin/registry.go):
                  scheduling/scorer/{queuedepth,kvcacheutilization,prefix},
                  requestcontrol/dataproducer/approximateprefix/types.go,
                  datalayer/source/metrics/datasource.go,
                  datalayer/extractor/metrics/factories.go
  MIN_BLOCK       approximateprefix/plugin.go (minBlockSizeTokens)

    scripts/validate-epp.py deploy/kubernetes/scale-out/epp.yaml
"""
import copy
import sys

import yaml

RELEASE = "v0.10.0"
IMAGE = f"ghcr.io/llm-d/llm-d-router-endpoint-picker:{RELEASE}"
CONFIG_API = "llm-d.ai/v1alpha1"

BOOL, VALUE = "bool", "value"
FLAGS = {
    **{f: VALUE for f in (
        "grpc-port", "drain-timeout", "grpc-max-recv-msg-size", "grpc-max-send-msg-size",
        "pool-group", "pool-namespace", "pool-name", "endpoint-selector",
        "endpoint-target-ports", "refresh-metrics-interval",
        "refresh-prometheus-metrics-interval", "metrics-staleness-threshold",
        "metrics-port", "grpc-health-port", "cert-path", "tls-min-version",
        "tls-cipher-suites", "metrics-client-ca-file", "metrics-cert-dir", "config-file",
        "config-text", "v", "zap-encoder", "zap-log-level", "zap-stacktrace-level",
        "zap-time-encoding")},
    **{f: BOOL for f in (
        "ha-enable-leader-election", "disable-endpoint-subset-filter",
        "emit-endpoint-scores", "tracing", "health-checking", "enable-pprof",
        "enable-cert-reload", "enable-grpc-stream-metrics", "secure-serving",
        "metrics-endpoint-auth", "allow-experimental-plugins", "zap-devel")},
}
REFUSED_FLAGS = {
    "total-queued-requests-metric", "total-running-requests-metric",
    "kv-cache-usage-percentage-metric", "lora-info-metric", "cache-info-metric",
}

CONFIG_FIELDS = {
    "apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles", "dataLayer",
    "flowControl", "requestHandler", "saturationDetector", "parser",
}
PLUGIN_FIELDS = {"name", "type", "parameters"}
PROFILE_FIELDS = {"name", "plugins"}
PROFILE_PLUGIN_FIELDS = {"pluginRef", "weight"}
DATA_LAYER_FIELDS = {"injectDefaults", "sources", "discovery", "crossReplicaSyncerPluginRef",
                     "crossReplicaSyncInterval"}
SOURCE_FIELDS = {"pluginRef", "extractors"}
EXTRACTOR_FIELDS = {"pluginRef"}

ENGINE_FIELDS = {
    "name", "queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec",
    "cacheInfoSpec", "cacheBlockSizeLabelName", "cacheNumBlocksLabelName",
    "cacheBlockSizeSpec", "cacheNumBlocksSpec", "customMetrics",
}
# Plugin type -> its parameters (None: the factory takes none).
PARAMETERS = {
    "queue-scorer": None,
    "kv-cache-utilization-scorer": None,
    "prefix-cache-scorer": {"prefixMatchInfoProducerName", "matchLengthWeight",
                            "matchLengthScaleTokens"},
    "approx-prefix-cache-producer": {"autoTune", "blockSizeTokens", "blockSize",
                                     "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch",
                                     "lruCapacityPerServer"},
    "metrics-data-source": {"scheme", "path", "port", "insecureSkipVerify", "caCertPath",
                            "clientCertPath", "clientKeyPath", "interval"},
    "core-metrics-extractor": {"engineLabelKey", "defaultEngine", "engineConfigs"},
}
MIN_BLOCK = 64


def unknown(where, obj, allowed):
    if not isinstance(obj, dict):
        return [f"{where}: not an object"]
    return [f"{where}: unknown field {k!r}" for k in obj if k not in allowed]


def check_config(cfg):
    errs = unknown("config", cfg, CONFIG_FIELDS)
    if cfg.get("apiVersion") != CONFIG_API or cfg.get("kind") != "EndpointPickerConfig":
        errs.append(f"config: not a {CONFIG_API} EndpointPickerConfig")
    names = {}
    for i, p in enumerate(cfg.get("plugins") or []):
        errs += unknown(f"plugins[{i}]", p, PLUGIN_FIELDS)
        kind = p.get("type")
        if kind not in PARAMETERS:
            errs.append(f"plugins[{i}]: plugin type {kind!r} not in {RELEASE}'s table")
            continue
        names[p.get("name", kind)] = kind
        params, allowed = p.get("parameters"), PARAMETERS[kind]
        if params is None:
            continue
        if allowed is None:
            errs.append(f"plugins[{i}] ({kind}): takes no parameters")
            continue
        errs += unknown(f"plugins[{i}] ({kind})", params, allowed)
        if kind == "approx-prefix-cache-producer":
            if params.get("blockSizeTokens", MIN_BLOCK) < MIN_BLOCK:
                errs.append(f"{kind}: blockSizeTokens below {MIN_BLOCK} is raised to it")
        if kind == "core-metrics-extractor":
            engines = params.get("engineConfigs") or []
            for j, e in enumerate(engines):
                errs += unknown(f"{kind} engineConfigs[{j}]", e, ENGINE_FIELDS)
            if params.get("defaultEngine", "vllm") not in {e.get("name") for e in engines} | {"vllm"}:
                errs.append(f"{kind}: defaultEngine {params.get('defaultEngine')!r} not configured")
    for i, prof in enumerate(cfg.get("schedulingProfiles") or []):
        errs += unknown(f"schedulingProfiles[{i}]", prof, PROFILE_FIELDS)
        for j, ref in enumerate(prof.get("plugins") or []):
            errs += unknown(f"schedulingProfiles[{i}].plugins[{j}]", ref, PROFILE_PLUGIN_FIELDS)
            if ref.get("pluginRef") not in names:
                errs.append(f"schedulingProfiles[{i}]: no plugin {ref.get('pluginRef')!r}")
    dl = cfg.get("dataLayer")
    if dl is not None:
        errs += unknown("dataLayer", dl, DATA_LAYER_FIELDS)
        for i, src in enumerate(dl.get("sources") or []):
            errs += unknown(f"dataLayer.sources[{i}]", src, SOURCE_FIELDS)
            refs = [src.get("pluginRef")] + [e.get("pluginRef") for e in src.get("extractors") or []]
            for e in src.get("extractors") or []:
                errs += unknown(f"dataLayer.sources[{i}].extractors", e, EXTRACTOR_FIELDS)
            errs += [f"dataLayer.sources[{i}]: no plugin {r!r}" for r in refs if r not in names]
    return errs


def parse_args(args):
    """The flags as pflag reads them: --name value, --name=value, a bool alone."""
    flags, errs, i = {}, [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            errs.append(f"args: {a!r} is not a flag (a positional argument ends the flags)")
            i += 1
            continue
        name, eq, value = a.lstrip("-").partition("=")
        if name in REFUSED_FLAGS:
            errs.append(f"args: --{name} is refused by {RELEASE} (use engineConfigs)")
        kind = FLAGS.get(name)
        if kind is None and name not in REFUSED_FLAGS:
            errs.append(f"args: --{name} is not a flag of {RELEASE}")
        if not eq and kind != BOOL:
            if i + 1 >= len(args):
                errs.append(f"args: --{name} has no value")
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        if kind == BOOL and eq and value not in ("true", "false"):
            errs.append(f"args: --{name}={value}: not a boolean")
        flags[name] = value if (eq or kind != BOOL) else "true"
        i += 1
    return flags, errs


def check(docs):
    errs = []
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep = by_kind.get(("Deployment", "sluice-epp"))
    if dep is None:
        return ["no Deployment sluice-epp"]
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    if c["image"] != IMAGE:
        errs.append(f"image {c['image']} is not {IMAGE}, the release these tables are from")
    flags, ferrs = parse_args(c.get("args", []))
    errs += ferrs
    if "pool-name" not in flags:
        errs.append("args: no --pool-name")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    path = flags.get("config-file", "")
    directory, _, key = path.rpartition("/")
    cm_name = vols.get(mounts.get(directory), {}).get("configMap", {}).get("name")
    cm = by_kind.get(("ConfigMap", cm_name))
    if cm is None or key not in cm.get("data", {}):
        errs.append(f"--config-file {path!r} is not a key of a mounted ConfigMap")
        return errs
    errs += check_config(yaml.safe_load(cm["data"][key]))
    return errs


def main(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    errs = check(docs)
    for e in errs:
        print(f"FAIL {path}: {e}")
    # The check must be able to fail.
    def broken(edit):
        bad = copy.deepcopy(docs)
        edit(bad)
        return bad

    def cm(bad):
        return [d for d in bad if d["kind"] == "ConfigMap"][0]

    def epp_args(bad):
        return [d for d in bad if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]

    def edit_config(fn):
        def edit(bad):
            c = cm(bad)
            key = next(iter(c["data"]))
            cfg = yaml.safe_load(c["data"][key])
            fn(cfg)
            c["data"][key] = yaml.safe_dump(cfg)
        return edit

    cases = {
        "a refused metric flag": lambda b: epp_args(b).extend(["--kv-cache-usage-percentage-metric", "x"]),
        "a flag of another release": lambda b: epp_args(b).extend(["--model-server-metrics-path", "/metrics"]),
        "a boolean with a separate value": lambda b: epp_args(b).extend(["--tracing", "false"]),
        "an unknown plugin parameter": edit_config(lambda c: c["plugins"][-1].setdefault("parameters", {}).update(typo=1)),
        "prefix parameters on the scorer": edit_config(lambda c: c["plugins"].append({"type": "prefix-cache-scorer", "name": "p2", "parameters": {"blockSize": 16}})),
        "an unknown config field": edit_config(lambda c: c.update(scorers=[])),
        "a dangling pluginRef": edit_config(lambda c: c["schedulingProfiles"][0]["plugins"].append({"pluginRef": "nope"})),
    }
    for what, edit in cases.items():
        if not check(broken(edit)):
            errs.append(what)
            print(f"FAIL the check accepted {what}")
    if errs:
        sys.exit(1)
    print(f"endpoint picker: flags and config valid for llm-d-router {RELEASE}")


if __name__ == "__main__":
    main(sys.argv[1])
