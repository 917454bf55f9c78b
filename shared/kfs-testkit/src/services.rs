//! Servers a test starts for itself and stops when dropped: PostgreSQL (the SQL
//! catalog and ledger on a server) and etcd (the offset cross-check), each on a free
//! local port in a fresh data directory.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::workspace_root;

/// A PostgreSQL server (Debian's `postgresql`) in a fresh data directory on a free
/// local port, trusting local connections as user `kfs`, killed on drop. As root, it
/// runs as the `postgres` user, which PostgreSQL requires.
#[derive(Debug)]
pub struct Postgres {
    child: Child,
    /// `postgres://kfs@127.0.0.1:<port>/postgres`.
    pub url: String,
    /// The port.
    pub port: u16,
    _data: tempfile::TempDir,
}

/// A PostgreSQL program: on the `PATH`, else in Debian's version directories.
fn postgres_program(name: &str) -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    on_path.unwrap_or_else(|| {
        let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|dirs| {
                dirs.flatten()
                    .map(|d| d.path().join("bin").join(name))
                    .collect()
            })
            .unwrap_or_default();
        versions.sort();
        versions
            .pop()
            .unwrap_or_else(|| panic!("{name}: apt-get install postgresql"))
    })
}

impl Postgres {
    /// Initialises a data directory, starts the server and waits for it.
    pub fn start() -> Self {
        let data = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        if running_as_root() {
            let status = Command::new("chown")
                .arg("postgres")
                .arg(data.path())
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "chown postgres (apt-get install postgresql)"
            );
        }
        let directory = data.path().join("data");
        let initialised = server_command("initdb")
            .arg("-D")
            .arg(&directory)
            .args(["-A", "trust", "-U", "kfs"])
            .status();
        assert!(initialised.is_ok_and(|s| s.success()), "initdb failed");
        // A free port can be taken by another test's server before ours binds it: ours
        // then exits, and we try again on another. Readiness is asked through the Unix
        // socket in our own data directory, so it is never another server's answer.
        let mut attempts = 0;
        let (child, port) = loop {
            attempts += 1;
            let port = free_port();
            let mut child = server_command("postgres")
                .arg("-D")
                .arg(&directory)
                .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-k"])
                .arg(data.path())
                .spawn()
                .unwrap_or_else(|e| panic!("postgres (apt-get install postgresql): {e}"));
            let deadline = Instant::now() + Duration::from_secs(30);
            let ready = loop {
                if server_command("pg_isready")
                    .arg("-h")
                    .arg(data.path())
                    .args(["-p", &port.to_string(), "-U", "kfs"])
                    .status()
                    .is_ok_and(|s| s.success())
                {
                    break true;
                }
                if child.try_wait().is_ok_and(|exited| exited.is_some())
                    || Instant::now() >= deadline
                {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            if ready {
                break (child, port);
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(attempts < 5, "postgres did not start (last port {port})");
        };
        Self {
            child,
            url: format!("postgres://kfs@127.0.0.1:{port}/postgres"),
            port,
            _data: data,
        }
    }
}

/// A PostgreSQL program run as the server's user (`postgres` when we are root).
fn server_command(program: &str) -> Command {
    let program = postgres_program(program);
    let mut command = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    command.stdout(Stdio::null()).stderr(Stdio::null());
    command
}

fn running_as_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Stopped by its own tool: killing `runuser` would leave the server running.
        let _ = server_command("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self._data.path().join("data"))
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A single-node etcd (Debian's `etcd-server`) on free local ports, killed on drop:
/// plain, or as deployed ([`Etcd::start_secure`]): TLS with client certificates, and
/// authentication once [`Etcd::enable_auth`] is called.
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    /// `http://127.0.0.1:<port>` (`https://` when secure).
    pub endpoint: String,
    /// The test PKI of a secure etcd (`ca.pem`, `client.pem`, `client-key.pem`, ...).
    pub tls: Option<PathBuf>,
    /// `root:<password>` once authentication is on.
    user: Option<String>,
    _data: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

impl Etcd {
    /// Starts etcd and waits until it accepts connections (on fresh ports again if a
    /// port it was given was taken meanwhile by another test's server).
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts etcd serving TLS only, with a certificate of a fresh CA
    /// (`tests/python/make_certs.py`) and `--client-cert-auth`.
    pub fn start_secure() -> Self {
        Self::start_with(true)
    }

    fn start_with(secure: bool) -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(secure) {
                Ok(etcd) => return etcd,
                Err(e) => last = e,
            }
        }
        panic!("{last}")
    }

    fn try_start(secure: bool) -> Result<Self, String> {
        let data = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let (client, peer) = (free_port(), free_port());
        let scheme = if secure { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{client}");
        let tls = if secure {
            let dir = data.path().join("pki");
            let made = Command::new("python3")
                .arg(workspace_root().join("tests/python/make_certs.py"))
                .arg(&dir)
                .output()
                .map_err(|e| format!("make_certs.py: {e}"))?;
            if !made.status.success() {
                return Err(format!(
                    "make_certs.py: {}",
                    String::from_utf8_lossy(&made.stderr)
                ));
            }
            Some(dir)
        } else {
            None
        };
        let tls_args: Vec<String> = tls.as_ref().map_or_else(Vec::new, |dir| {
            vec![
                format!("--cert-file={}", dir.join("server.pem").display()),
                format!("--key-file={}", dir.join("server-key.pem").display()),
                format!("--trusted-ca-file={}", dir.join("ca.pem").display()),
                "--client-cert-auth".to_owned(),
            ]
        });
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(data.path().join("etcd.log"))
            .map_err(|e| format!("etcd log: {e}"))?;
        let mut child = Command::new("etcd")
            .arg("--data-dir")
            .arg(data.path().join("data"))
            .args([
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .args(&tls_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("etcd (apt-get install etcd-server): {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let failed = |child: &mut Child, what: &str| {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(data.path().join("etcd.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            format!("etcd {what} on {endpoint}: {tail}")
        };
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            if Instant::now() >= deadline || child.try_wait().ok().flatten().is_some() {
                return Err(failed(&mut child, "did not start"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut etcd = Self {
            child,
            endpoint: endpoint.clone(),
            tls,
            user: None,
            _data: data,
        };
        // The first request can race the server's election: wait for a clean write.
        while etcd.try_put("/kfs-testkit/ready", "1").is_err() {
            if Instant::now() >= deadline {
                let _ = etcd.child.kill();
                return Err(format!("etcd did not become ready on {endpoint}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(etcd)
    }

    /// Runs `etcdctl` against this server, with its TLS files and user.
    fn etcdctl(&self, args: &[&str]) -> Result<(), String> {
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint]);
        if let Some(dir) = &self.tls {
            command.arg(format!("--cacert={}", dir.join("ca.pem").display()));
            command.arg(format!("--cert={}", dir.join("client.pem").display()));
            command.arg(format!("--key={}", dir.join("client-key.pem").display()));
        }
        if let Some(user) = &self.user {
            command.arg(format!("--user={user}"));
        }
        let output = command
            .args(args)
            .output()
            .map_err(|e| format!("etcdctl (apt-get install etcd-client): {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn try_put(&self, key: &str, value: &str) -> Result<(), String> {
        self.etcdctl(&["put", key, value])
    }

    /// Turns authentication on: user `root` (role `root`) with `password`; every
    /// later request needs the user (`etcdctl` here gets it).
    pub fn enable_auth(&mut self, password: &str) {
        for args in [
            vec!["user", "add", "root", "--new-user-password", password],
            vec!["user", "grant-role", "root", "root"],
            vec!["auth", "enable"],
        ] {
            self.etcdctl(&args)
                .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"));
        }
        self.user = Some(format!("root:{password}"));
    }

    /// Writes a key, as the broker does.
    pub fn put(&self, key: &str, value: &str) {
        self.try_put(key, value)
            .unwrap_or_else(|e| panic!("etcdctl put {key}: {e}"));
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
