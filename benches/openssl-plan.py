#!/usr/bin/env python3
"""openssl-plan.py TREE PLAN EXTDIR

Untimed preparation for the openssl baseline (benches/openssl-renew.sh): reads every leaf
certificate under TREE with the openssl CLI and writes PLAN, one line per leaf,
tab-separated and relative to TREE:

    cert  key  ca-cert  ca-key  key-type  subject  extfile

key-type is rsa2048 / rsa3072 / rsa4096 / p256 / p384 / ed25519 (for key rotation);
subject is in openssl's /A=b/C=d form for `openssl req -subj`; extfile (under EXTDIR) is
an openssl extension file that re-creates the leaf's extensions (usages, SANs, basic
constraints, key identifiers), written the way an operator's script would hard-code them.

This work is what the operator's script has hard-coded (file names, subjects, SANs), so it
is kept out of the timed part: the baseline is only the per-file check + req + x509 -req.
"""
import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

KU = {
    "Digital Signature": "digitalSignature",
    "Non Repudiation": "nonRepudiation",
    "Content Commitment": "nonRepudiation",
    "Key Encipherment": "keyEncipherment",
    "Data Encipherment": "dataEncipherment",
    "Key Agreement": "keyAgreement",
    "Certificate Sign": "keyCertSign",
    "CRL Sign": "cRLSign",
}
EKU = {
    "TLS Web Server Authentication": "serverAuth",
    "TLS Web Client Authentication": "clientAuth",
    "Code Signing": "codeSigning",
    "E-mail Protection": "emailProtection",
    "Time Stamping": "timeStamping",
    "OCSP Signing": "OCSPSigning",
}


def describe(path):
    out = subprocess.run(
        ["openssl", "x509", "-in", path, "-noout", "-subject", "-issuer", "-nameopt", "compat",
         "-text", "-certopt", "no_header,no_version,no_serial,no_signame,no_validity,no_sigdump,no_aux"],
        capture_output=True, text=True)
    if out.returncode != 0:
        return None
    lines = out.stdout.splitlines()
    d = {"subject": None, "issuer": None, "alg": None, "bits": None, "curve": None, "ext": {}}
    cur = None
    for i, line in enumerate(lines):
        s = line.strip()
        if line.startswith("subject="):
            d["subject"] = line[len("subject="):]
        elif line.startswith("issuer="):
            d["issuer"] = line[len("issuer="):]
        elif s.startswith("Public Key Algorithm:"):
            d["alg"] = s.split(":", 1)[1].strip()
        elif s.startswith("Public-Key: (") or s.startswith("RSA Public-Key: ("):
            d["bits"] = int(s.split("(")[1].split()[0])
        elif s.startswith("NIST CURVE:"):
            d["curve"] = s.split(":", 1)[1].strip()
        elif s.startswith("X509v3 ") and s.rstrip().endswith((":", ": critical")):
            name, _, crit = s.partition(":")
            cur = name
            d["ext"][cur] = {"critical": crit.strip() == "critical", "value": ""}
        elif cur and line.startswith("                ") and not d["ext"][cur]["value"]:
            d["ext"][cur]["value"] = s
        elif not line.startswith("                "):
            cur = None
    return d


def key_type(d):
    if d["alg"] == "rsaEncryption":
        return f"rsa{d['bits']}"
    if d["alg"] == "id-ecPublicKey":
        return {"P-256": "p256", "P-384": "p384"}.get(d["curve"], "p256")
    if d["alg"] == "ED25519":
        return "ed25519"
    return "unknown"


def extfile(d):
    e = d["ext"]
    out = []

    def crit(name):
        return "critical, " if e[name]["critical"] else ""

    if "X509v3 Basic Constraints" in e:
        out.append(f"basicConstraints = {crit('X509v3 Basic Constraints')}{e['X509v3 Basic Constraints']['value']}")
    if "X509v3 Key Usage" in e:
        v = ", ".join(KU[x.strip()] for x in e["X509v3 Key Usage"]["value"].split(","))
        out.append(f"keyUsage = {crit('X509v3 Key Usage')}{v}")
    if "X509v3 Extended Key Usage" in e:
        v = ", ".join(EKU.get(x.strip(), x.strip()) for x in e["X509v3 Extended Key Usage"]["value"].split(","))
        out.append(f"extendedKeyUsage = {crit('X509v3 Extended Key Usage')}{v}")
    if "X509v3 Subject Alternative Name" in e:
        v = e["X509v3 Subject Alternative Name"]["value"].replace("IP Address:", "IP:")
        out.append(f"subjectAltName = {crit('X509v3 Subject Alternative Name')}{v}")
    if "X509v3 Subject Key Identifier" in e:
        out.append("subjectKeyIdentifier = hash")
    if "X509v3 Authority Key Identifier" in e:
        out.append("authorityKeyIdentifier = keyid")
    return "\n".join(out) + "\n"


def key_for(cert):
    base, ext = os.path.splitext(cert)
    for k in (base + ".key", base + "-key.pem"):
        if os.path.exists(k):
            return k
    return None


def main():
    tree, plan, extdir = sys.argv[1:4]
    os.makedirs(extdir, exist_ok=True)
    certs = []
    for root, _dirs, files in os.walk(tree):
        for f in files:
            if f.endswith((".crt", ".pem")) and not f.endswith("-key.pem"):
                certs.append(os.path.join(root, f))
    certs.sort()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        descs = list(ex.map(describe, certs))
    cas = {}
    for c, d in zip(certs, descs):
        if d and "CA:TRUE" in d["ext"].get("X509v3 Basic Constraints", {}).get("value", ""):
            k = key_for(c)
            if k:
                cas.setdefault(d["subject"], (c, k))
    n = 0
    with open(plan, "w") as out:
        for c, d in zip(certs, descs):
            if not d or "CA:TRUE" in d["ext"].get("X509v3 Basic Constraints", {}).get("value", ""):
                continue
            k = key_for(c)
            ca = cas.get(d["issuer"])
            if not k or not ca:
                continue
            text = extfile(d)
            name = hashlib.sha256(text.encode()).hexdigest()[:12] + ".ext"
            path = os.path.join(extdir, name)
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(text)
            rel = lambda p: os.path.relpath(p, tree)
            out.write("\t".join([rel(c), rel(k), rel(ca[0]), rel(ca[1]), key_type(d), d["subject"],
                                 os.path.abspath(path)]) + "\n")
            n += 1
    print(f"{n} leaves planned", file=sys.stderr)


if __name__ == "__main__":
    main()
