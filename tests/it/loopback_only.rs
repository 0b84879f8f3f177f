//! This binary runs in a network namespace of its own, where only loopback is up. certrenewd
//! dials the addresses it reads (manifest flags and annotations, kubeconfig servers, etcd
//! URLs), and so do tools the tests run: a version-picking `kubectl` asks a kubeconfig's
//! server for its version even for `config view`. A fixture address that is not loopback
//! would reach whatever host answers there; in this namespace it fails at once with "network
//! unreachable" and never leaves the machine.
//!
//! The binary enters the namespace itself, before `main`, while it has one thread: every test
//! thread libtest starts, and every process a test starts, is in it however the binary is run
//! (`cargo test`, `.ci/run`, by hand). Entering needs root (`CAP_SYS_ADMIN`); without it the
//! binary says so, and under CI it stops before any test runs.
//!
//! The tests below prove both halves: a connect beyond loopback is unreachable here, from the
//! test and from a process it starts; and every address in a fixture that a program may dial
//! is loopback, so the tests do not lean on the namespace to be harmless.

use std::fs;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common;

/// Run by the loader before `main` (the `.init_array` section holds functions the C runtime
/// calls at start, as it does C++ constructors), when no other thread exists yet.
#[used]
#[unsafe(link_section = ".init_array")]
static ENTER_AT_START: extern "C" fn() = enter_at_start;

extern "C" fn enter_at_start() {
    let Err(e) = enter_loopback_only_namespace() else {
        return;
    };
    let why = format!("tests/it could not enter a network namespace of its own: {e}");
    if common::skip::in_ci() {
        eprintln!("{why}; with CI=true no test runs where it could dial another host");
        std::process::exit(1);
    }
    eprintln!("WARNING {why} (run as root): a test that dials may reach other hosts");
}

/// `unshare(CLONE_NEWNET)` for the calling thread, then loopback up: a new namespace holds
/// only `lo`, and down.
fn enter_loopback_only_namespace() -> std::io::Result<()> {
    // SAFETY: unshare(2) takes no pointers and changes only the calling thread's namespaces;
    // called before main, that thread is the only one, and every later thread inherits it.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    loopback_up()
}

/// Sets `IFF_UP` on `lo`, as `ip link set lo up` does.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket(2) takes no pointers; the descriptor it returns is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain data (a name and a union of integers): all zeroes is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in req.ifr_name.iter_mut().zip(b"lo") {
        *to = *from as libc::c_char;
    }
    // SAFETY: both ioctls read or write `req`, which outlives them, on a socket we own; the
    // flags are the union's member that SIOCGIFFLAGS fills and SIOCSIFFLAGS reads.
    unsafe {
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The address the kubeadm fixtures named as the node's before they named a loopback one,
/// and a documentation address: both must be unreachable from here.
const BEYOND: [&str; 3] = [
    "192.168.206.2:6443",
    "192.0.2.10:2379",
    "[2001:db8::10]:2379",
];

#[test]
fn a_connect_beyond_loopback_is_unreachable_from_a_test_and_from_what_it_starts() {
    // The process that started this binary (cargo, or a shell) is where it would dial from.
    let ours = fs::read_link("/proc/thread-self/ns/net").expect("this thread's netns");
    let parent = format!("/proc/{}/ns/net", std::os::unix::process::parent_id());
    let theirs = fs::read_link(&parent).expect(&parent);
    assert_ne!(
        ours, theirs,
        "the tests share the network namespace of the process that started them"
    );
    let links: Vec<String> = fs::read_to_string("/proc/thread-self/net/dev")
        .expect("/proc/thread-self/net/dev")
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|n| n.trim().to_string()))
        .collect();
    assert_eq!(links, ["lo"], "the links of the tests' namespace");

    for addr in BEYOND {
        let to: SocketAddr = addr.parse().unwrap();
        let err = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map(|_| ())
            .expect_err(addr);
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ENETUNREACH),
            "connect to {addr} from the test: {err}"
        );
        // A process the test starts: bash's /dev/tcp is a plain connect(2).
        let (host, port) = addr.rsplit_once(':').unwrap();
        let host = host.trim_matches(['[', ']']);
        let out = Command::new("bash")
            .args(["-c", &format!("exec 3<>/dev/tcp/{host}/{port}")])
            .output()
            .expect("bash");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("Network is unreachable"),
            "connect to {addr} from a child: {out:?}"
        );
    }

    // Loopback works, at 127.0.0.1 and elsewhere in 127.0.0.0/8 (the fixtures' node address).
    for ip in ["127.0.0.1", "127.0.206.2"] {
        let listener = TcpListener::bind((ip, 0)).expect(ip);
        let to = listener.local_addr().unwrap();
        TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to {to}: {e}"));
        listener.accept().expect("accept");
        drop(listener);
        let refused = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map(|_| ())
            .expect_err("nothing listens any more");
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{to}");
    }
}

/// The settings a program reads an address from and then dials: kubeconfig `server:`,
/// kube-apiserver's and etcd's flags (also in etcd's environment-variable and YAML spellings),
/// kubeadm's annotations, and certrenewd's own `endpoints`.
const DIALED: &[&str] = &[
    "server:",
    "--server",
    "advertise-address",
    "bind-address",
    "etcd-servers",
    "listen-client-urls",
    "listen-peer-urls",
    "listen-metrics-urls",
    "advertise-client-urls",
    "advertise-peer-urls",
    "initial-cluster",
    "endpoints",
    "ETCD_ADVERTISE_CLIENT_URLS",
    "ETCD_LISTEN_CLIENT_URLS",
    "ETCD_LISTEN_PEER_URLS",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_INITIAL_CLUSTER",
    "ETCDCTL_ENDPOINTS",
];

/// What the scan found: how many lines give a dialed setting, and those naming an address
/// beyond loopback there (`file:line: addresses in text`).
#[derive(Default)]
struct Scan {
    settings: usize,
    offenders: Vec<String>,
}

impl Scan {
    /// Every text file under `dir` (keys, DER and the deliberately unreadable have no text,
    /// so no setting).
    fn files_under(&mut self, dir: &Path) {
        for file in common::walk::files_under(dir) {
            if let Ok(text) = fs::read_to_string(&file) {
                self.text(&file, &text);
            }
        }
    }

    fn text(&mut self, file: &Path, text: &str) {
        for (i, line) in text.lines().enumerate() {
            let Some(ips) = beyond_loopback(line) else {
                continue;
            };
            self.settings += 1;
            if !ips.is_empty() {
                let at = format!("{}:{}", file.display(), i + 1);
                self.offenders
                    .push(format!("{at}: {ips:?} in {}", line.trim()));
            }
        }
    }
}

/// Every IP address written after a dialed setting's name on `line` that is not loopback;
/// `None` when the line gives no dialed setting.
fn beyond_loopback(line: &str) -> Option<Vec<IpAddr>> {
    let at = DIALED.iter().filter_map(|k| line.find(k)).min()?;
    let rest = &line[at..];
    let mut found = Vec::new();
    // IPv4 literals: runs of digits and dots; IPv6 ones: what URLs put in brackets.
    for word in rest.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
        if let Ok(ip) = word.trim_matches('.').parse::<IpAddr>() {
            found.push(ip);
        }
    }
    for bracketed in rest.split('[').skip(1) {
        if let Some(ip) = bracketed.split(']').next().and_then(|s| s.parse().ok()) {
            found.push(ip);
        }
    }
    found.retain(|ip: &IpAddr| !ip.is_loopback());
    Some(found)
}

#[test]
fn the_checker_finds_a_dialed_address_beyond_loopback_and_passes_names_and_sans() {
    for bad in [
        "    server: https://192.0.2.2:6443",
        "    - --advertise-address=192.0.2.10",
        "    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 192.0.2.7:6443",
        "    - --initial-cluster=a=https://127.0.0.1:2380,b=https://192.0.2.3:2380",
        "ETCD_LISTEN_CLIENT_URLS=https://[2001:db8::1]:2379",
        "endpoints = [\"https://192.0.2.4:2379\"]",
    ] {
        assert!(
            beyond_loopback(bad).is_some_and(|ips| !ips.is_empty()),
            "not caught: {bad}"
        );
    }
    for good in [
        "    server: https://127.0.206.2:6443",
        "    - --listen-client-urls=https://127.0.0.1:2379,https://[::1]:2379",
        "    - --advertise-address={ip}",
        "        --san \"DNS:localhost, IP:127.0.0.1, IP:192.0.2.1\"",
        "    server: https://controller-0:6443",
        "subjectAltName = IP:192.0.2.96",
    ] {
        assert!(
            beyond_loopback(good).is_none_or(|ips| ips.is_empty()),
            "{good}"
        );
    }
}

/// Every layout the fixture scripts make (mkpki.sh's, mkca-aging.sh's, mkkubelet.sh's) and
/// every test source that writes a manifest, kubeconfig, unit or config: an address a program
/// may dial is in 127.0.0.0/8 or ::1. Names in certificates may be anything: nothing dials them.
#[test]
fn every_address_a_fixture_gives_a_program_to_dial_is_loopback() {
    let mut layouts: Vec<&str> = common::pki::ALL_LAYOUTS.to_vec();
    layouts.extend(["hardway-etcd", "ha-etcd", "ha-kubeadm"]);
    let masters = common::pki::masters(&layouts);
    let scratch = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (script, args) in [
        ("mkca-aging.sh", &["--copies"][..]),
        ("mkkubelet.sh", &[][..]),
    ] {
        let out_dir = scratch.path().join(script);
        let out = Command::new("bash")
            .arg(fixtures.join(script))
            .arg(&out_dir)
            .args(args)
            .output()
            .expect(script);
        assert!(out.status.success(), "{script}: {out:?}");
    }

    let mut scan = Scan::default();
    for layout in &layouts {
        scan.files_under(&masters.join(layout));
    }
    scan.files_under(scratch.path());
    let from_fixtures = scan.settings;

    // What the tests write themselves: manifests, kubeconfigs, units and configs in Rust and
    // shell sources. The booted controllers are not here: each runs in a network namespace of
    // its own, on addresses of that namespace.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<PathBuf> = Vec::new();
    for dir in [
        "tests/it",
        "tests/common",
        "tests/fixtures",
        "tests/sandbox",
        "benches",
    ] {
        sources.extend(common::walk::files_under(&root.join(dir)));
    }
    sources.push(root.join("tests/demo.sh"));
    sources.retain(|f| {
        f.extension().is_some_and(|e| e == "rs" || e == "sh") && !f.ends_with("loopback_only.rs")
    });
    for file in &sources {
        scan.text(file, &fs::read_to_string(file).expect("a source"));
    }
    // The scan read real settings, not nothing: the fixture scripts' seven kubeconfig servers
    // (kubeadm's four, OpenShift's, the aging CA's admin.conf with two clusters), and the
    // manifests and units with etcd's and the API server's flags that the tests write.
    assert!(
        from_fixtures >= 7 && scan.settings - from_fixtures >= 50 && sources.len() > 40,
        "only {from_fixtures} settings in the fixtures and {} in {} sources: has their \
         shape changed?",
        scan.settings - from_fixtures,
        sources.len()
    );
    assert!(
        scan.offenders.is_empty(),
        "addresses beyond loopback that a program may dial ({} settings read in {} layouts \
         and {} sources):\n{}",
        scan.settings,
        layouts.len() + 2,
        sources.len(),
        scan.offenders.join("\n")
    );
    eprintln!(
        "{} dialed settings read ({from_fixtures} in the fixture scripts' {} layouts, the rest \
         in {} test sources): all loopback",
        scan.settings,
        layouts.len() + 2,
        sources.len()
    );
}
