//! A stand-in for kubelet on a kubeadm controller (tests/controllers/outage.rs,
//! tests/controllers/kubeadm_ha.rs): certrenewd restarts a static pod by moving its manifest
//! out of /etc/kubernetes/manifests and back, and only a kubelet that stops the pod when the
//! manifest goes and starts it again from the manifest's flags when it returns shows what
//! that does to etcd and its clients. A shell script under a systemd unit, polling every
//! 200 ms (kubelet: 20 s), so a test does not wait for it.

use anyhow::Context;

use super::controllers::Controller;

/// The unit the stand-in runs as.
pub const UNIT: &str = "kubelet.service";
/// Where the script and the unit are put on a controller.
pub const SCRIPT_PATH: &str = "/usr/local/sbin/kubelet-standin";
pub const UNIT_PATH: &str = "/etc/systemd/system/kubelet.service";
/// The stand-in's own directory: what it read of each manifest, each pod's PID, etcd's log.
pub const RUN_DIR: &str = "/run/kubelet-standin";

/// kubelet on a kubeadm controller, as far as certificates go: runs each static pod from its
/// manifest's flags while the manifest is there (etcd itself; kube-apiserver as an
/// `openssl s_server` once etcd answers its etcd client certificate; controller-manager and
/// scheduler as clients of it with their kubeconfig's pair) and authenticates to the API
/// server with its own pair. Logs `kubelet started: client pair valid|EXPIRED: ...`,
/// `static pod NAME started: valid|EXPIRED: ...` (the certificates it reads, at that
/// moment), `static pod NAME stopped (manifest gone)`, each failed TLS handshake, and
/// `kubelet authenticated ... serial=S`; without kubelet's client pair it only runs the
/// static pods. etcd's own log goes to /run/kubelet-standin/etcd.log, every run appended.
pub const KUBELET: &str = r#"#!/bin/sh
K=/var/lib/kubelet/pki/kubelet-client-current.pem M=/etc/kubernetes/manifests R=/run/kubelet-standin
# validity CERT...: "valid", or "EXPIRED:" and the names of those not valid now
validity() {
  bad=
  for c; do openssl x509 -noout -checkend 0 -in "$c" >/dev/null 2>&1 || bad="$bad ${c##*/}"; done
  if [ -z "$bad" ]; then echo valid; else echo "EXPIRED:$bad"; fi
}
serial() { openssl x509 -noout -serial -in "$1"; }
flag() { sed -n "s/^    - --$2=//p" $R/$1.yaml; } # flag POD NAME: --NAME= of its manifest
# hello CERT KEY: a request to the API server as that client, verifying the server; its output
hello() {
  printf 'GET / HTTP/1.0\r\n\r\n' 2>/dev/null | timeout 10 openssl s_client -quiet -connect 127.0.0.1:6443 \
    -verify_hostname controller-0 -CAfile /etc/kubernetes/pki/ca.crt -verify_return_error \
    -cert "$1" -key "$2" 2>&1
}
apiserver() {
  f() { flag kube-apiserver "$1"; }
  echo "static pod kube-apiserver started: $(validity $(f tls-cert-file) $(f etcd-certfile) \
    $(f kubelet-client-certificate) $(f proxy-client-cert-file))"
  until ETCDCTL_API=3 etcdctl --endpoints=$(f etcd-servers) --cacert=$(f etcd-cafile) \
    --cert=$(f etcd-certfile) --key=$(f etcd-keyfile) endpoint health >/dev/null 2>&1; do sleep 0.5; done
  echo "static pod kube-apiserver reached etcd"
  exec openssl s_server -quiet -accept 127.0.0.1:$(f secure-port) -www -cert $(f tls-cert-file) \
    -key $(f tls-private-key-file) -CAfile $(f client-ca-file) -Verify 1 -verify_return_error >/dev/null 2>&1
}
client() { # client POD: authenticates with its kubeconfig's pair, then idles
  c=$(flag $1 kubeconfig)
  sed -n 's/^ *client-certificate-data: //p' $c | base64 -d >$R/$1.crt
  sed -n 's/^ *client-key-data: //p' $c | base64 -d >$R/$1.key
  echo "static pod $1 started: $(validity $R/$1.crt)"
  until hello $R/$1.crt $R/$1.key | grep -q '200 ok'; do sleep 0.5; done
  echo "static pod $1 authenticated to the API server, $(serial $R/$1.crt)"
  exec sleep infinity
}
pod() { # pod NAME: what kubelet read of its manifest, then the pod
  cp $M/$1.yaml $R/$1.yaml 2>/dev/null || exit 0
  case $1 in
    etcd) echo "static pod etcd started: $(validity $(flag etcd cert-file) $(flag etcd peer-cert-file))"
      exec etcd $(sed -n 's/^    - \(--.*\)$/\1/p' $R/etcd.yaml) >>$R/etcd.log 2>&1 ;;
    kube-apiserver) apiserver ;;
    *) client $1 ;;
  esac
}
# A node without kubelet's client pair (only static pods to run) does not authenticate.
if [ -e $K ]; then echo "kubelet started: client pair $(validity $K), $(serial $K)"; authed=
else echo "kubelet started: no client pair, static pods only"; authed=none; fi
failed=0
while :; do
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    if [ -f $M/$p.yaml ]; then
      if ! { [ -f $R/$p.pid ] && kill -0 "$(cat $R/$p.pid)" 2>/dev/null; }; then
        pod $p & echo $! >$R/$p.pid
      fi
    elif [ -f $R/$p.pid ]; then
      kill "$(cat $R/$p.pid)" 2>/dev/null; wait "$(cat $R/$p.pid)"; rm $R/$p.pid
      echo "static pod $p stopped (manifest gone)"
    fi
  done
  if [ -z "$authed" ]; then
    out=$(hello $K $K)
    case $out in
      *"200 ok"*) authed=1
        echo "kubelet authenticated to the API server after $failed failed handshake(s), $(serial $K)" ;;
      *connect:errno=*) ;;
      *) failed=$((failed + 1))
        echo "kubelet: TLS handshake with the API server failed: $(echo "$out" | grep -m1 -a error)" ;;
    esac
  fi
  sleep 0.2
done
"#;

/// A unit without ordering of its own: only certrenewd's `Before=` orders it.
pub const KUBELET_SERVICE: &str = "[Unit]\nDescription=stand-in for kubelet on a kubeadm controller\n\
    [Service]\nExecStart=/usr/local/sbin/kubelet-standin\nRuntimeDirectory=kubelet-standin\n\
    [Install]\nWantedBy=multi-user.target\n";

/// Installs the stand-in on a booted controller and starts it (no manifest yet: it idles).
pub fn start(node: &Controller) -> anyhow::Result<()> {
    // kubelet's staticPodPath: its package makes it.
    node.run(["mkdir", "-p", "/etc/kubernetes/manifests"])?;
    node.write_file(SCRIPT_PATH, KUBELET.as_bytes(), 0o755)?;
    node.write_file(UNIT_PATH, KUBELET_SERVICE.as_bytes(), 0o644)?;
    node.systemctl(&["daemon-reload"])?;
    node.systemctl(&["start", UNIT])
        .with_context(|| format!("starting the kubelet stand-in on {}", node.hostname()))?;
    Ok(())
}
