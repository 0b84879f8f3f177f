//! Helpers shared by the integration-test binaries `tests/it` and `tests/controllers` (the
//! controllers' own are in `tests/controllers/common/`).

pub mod containerd;
pub mod e2e;
pub mod etcd_e2e;
pub mod etcd_one;
pub mod failpoints;
pub mod pki;
pub mod sandbox;
pub mod skip;
pub mod table;
pub mod walk;

/// A test's config for one node with stand-in units and no etcd cluster: `[coordination]`
/// off, unless the config sets it. Under `auto`, a pass that owes etcd a restart on a node
/// where neither etcd's settings nor a client identity are found holds it (the node's
/// cluster is unknown): right on a controller, and not what these tests are about.
pub fn single_node(config: &str) -> String {
    match config.contains("[coordination]") {
        true => config.to_string(),
        false => format!("{config}\n[coordination]\nenabled = false\n"),
    }
}

/// libfaketime's preload library (Debian package faketime).
pub fn libfaketime() -> String {
    ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|arch| format!("/usr/lib/{arch}/faketime/libfaketime.so.1"))
        .find(|p| std::path::Path::new(p).exists())
        .expect("libfaketime (Debian package faketime)")
}

/// Runs `script` with `bash -eu -o pipefail` in `dir`, with the `faketime` of
/// `tests/fixtures/faketime.sh` (libfaketime preloaded, not the wrapper); a failure shows
/// the script and its stderr.
pub fn sh(dir: &std::path::Path, script: &str) {
    let script = format!(
        "source '{}/tests/fixtures/faketime.sh'\n{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// In `root/DIR`, by openssl with P-256 keys: a CA `ca.{crt,key}` (CN `ca_cn`, issued 730
/// days ago for ten years) and a leaf `server.{crt,key}` (CN `cn`, with the extension
/// lines `ext`) it signed 355 days ago for 365 days: due in ten, as a certificate comes due
/// in life. Keys mode 600.
pub fn due_ec_leaf(root: &std::path::Path, dir: &str, ca_cn: &str, cn: &str, ext: &str) {
    std::fs::create_dir_all(root.join(dir)).expect("mkdir");
    sh(
        root,
        &format!(
            "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {dir}/ca.key 2>/dev/null
             faketime -f -730d openssl req -x509 -new -key {dir}/ca.key -subj /CN={ca_cn} -days 3650 \
               -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
               -out {dir}/ca.crt
             openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {dir}/server.key 2>/dev/null
             openssl req -new -key {dir}/server.key -subj /CN={cn} -out {dir}/server.csr
             printf '{ext}' > {dir}/ext.cnf
             faketime -f -355d openssl x509 -req -in {dir}/server.csr -CA {dir}/ca.crt \
               -CAkey {dir}/ca.key -days 365 -extfile {dir}/ext.cnf -out {dir}/server.crt
             rm {dir}/server.csr {dir}/ext.cnf
             chmod 600 {dir}/*.key"
        ),
    );
}

/// etcd's member list on record in `state_dir`, as a pass or the daemon's watch of the other
/// controllers records it when etcd lists its members: `(name, client URL)` pairs, each
/// member's peer URL on port 2380 of the same host. Only with it is a cluster whose every
/// URL refuses connections taken for down.
pub fn etcd_members_on_record(state_dir: &std::path::Path, members: &[(&str, &str)]) {
    let members: Vec<certrenewd::coordinate::members::Member> = (members.iter())
        .zip(1..)
        .map(
            |(&(name, url), id)| certrenewd::coordinate::members::Member {
                id,
                name: name.into(),
                client_urls: vec![url.into()],
                peer_urls: vec![url.replace(":2379", ":2380")],
            },
        )
        .collect();
    certrenewd::coordinate::roster::write(state_dir, &members, &members[0].client_urls[0]);
    assert!(
        certrenewd::coordinate::roster::read(state_dir).is_some(),
        "not recorded in {}",
        state_dir.display()
    );
}

/// `openssl x509 -noout -in CERT ARGS...`, its stdout.
pub fn x509(cert: &std::path::Path, args: &[&str]) -> String {
    let path = cert.display().to_string();
    openssl(&[&["x509", "-noout", "-in", path.as_str()], args].concat())
}

/// A certificate's lifetime in seconds (notAfter - notBefore), from openssl's dates.
pub fn lifetime_secs(cert: impl AsRef<std::path::Path>) -> i64 {
    let secs = |flag: &str| {
        let v = x509(cert.as_ref(), &[flag]);
        let date = v.split_once('=').expect("a date").1.to_string();
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &date, "+%s"])
            .output()
            .expect("date");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .expect("seconds")
    };
    secs("-enddate") - secs("-startdate")
}

/// `openssl ARGS...`, its stdout trimmed; a failure shows its output.
pub fn openssl<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    openssl_run(std::process::Command::new("openssl").args(args), args)
}

/// [`openssl`] run in `dir` (relative paths in `args` are `dir`'s).
pub fn openssl_in<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    dir: &std::path::Path,
    args: &[S],
) -> String {
    openssl_run(
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir),
        args,
    )
}

fn openssl_run<S: std::fmt::Debug>(cmd: &mut std::process::Command, args: &[S]) -> String {
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// splitmix64: small, fast and replayable (the same seed gives the same numbers).
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from the environment variable `var` when it holds a number, else from the
    /// clock; the seed is printed as `VAR=seed` so that a run can be replayed.
    pub fn from_env_or_clock(var: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{var}={seed}");
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    /// A duration from zero to `d`, in whole microseconds.
    pub fn duration_below(&mut self, d: std::time::Duration) -> std::time::Duration {
        std::time::Duration::from_micros(self.below(d.as_micros() as usize + 1) as u64)
    }
}

/// A child started in a process group of its own (`process_group(0)`), ended with its
/// whole group when dropped: a wrapper script's children go with it.
pub struct KillGroup(pub std::process::Child);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let group = rustix::process::Pid::from_child(&self.0);
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = self.0.wait();
    }
}
