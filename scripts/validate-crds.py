#!/usr/bin/env python3
"""Validates custom resources offline against the CRD schemas vendored in
deploy/kubernetes/crds (each file named with its project and version): the InferencePool
and HTTPRoute of deploy/kubernetes/scale-out, and KEDA's ScaledObject. Strict like
`kubectl --validate=strict`: a field the schema does not define is an error (CEL rules,
x-kubernetes-validations, are not evaluated). Also proves it can fail: a copy with a
misspelt field and one with a wrong type must be refused.

    scripts/validate-crds.py FILE...   (run by scripts/test-deploy in the test venv)
"""
import copy
import glob
import os
import sys

import jsonschema
import yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "deploy", "kubernetes")


def strict(schema):
    """The CRD's structural schema as JSON Schema: int-or-string, no unknown fields."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if schema.pop("x-kubernetes-int-or-string", False):
            schema.pop("type", None)
            schema.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    return schema


def schemas():
    out = {}
    for path in glob.glob(os.path.join(ROOT, "crds", "*.yaml")):
        crd = yaml.safe_load(open(path))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            if v.get("served", True):
                s = strict(v["schema"]["openAPIV3Schema"])
                # Every object carries apiVersion, kind and metadata.
                s["properties"].setdefault("metadata", {"type": "object"})
                out[(f"{group}/{v['name']}", kind)] = s
    return out


def errors(doc, known):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in known:
        return [f"no vendored schema for {key}"]
    v = jsonschema.Draft7Validator(known[key])
    return [f"{'/'.join(map(str, e.path)) or '.'}: {e.message}" for e in v.iter_errors(doc)]


def main(files):
    known = schemas()
    failed = False
    docs = []
    for path in files:
        for doc in yaml.safe_load_all(open(path)):
            if doc is None:
                continue
            errs = errors(doc, known)
            name = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
            if errs:
                failed = True
                print(f"FAIL {name}", *errs, sep="\n  ")
            else:
                print(f"ok   {name} against {doc['apiVersion']}")
            docs.append(doc)
    # The check must be able to fail.
    for doc in docs:
        typo = copy.deepcopy(doc)
        typo["spec"]["specTypo"] = 1
        wrong = copy.deepcopy(doc)
        wrong["spec"] = "not an object"
        for bad in (typo, wrong):
            if not errors(bad, known):
                failed = True
                print(f"FAIL a broken {doc['kind']} was accepted")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
