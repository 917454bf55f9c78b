//! Test helpers shared by the workspace's tests: a moto server (S3, DynamoDB, Glue)
//! on a free local port, stopped when dropped, and the workspace paths.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running `moto_server`, killed on drop.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl Moto {
    /// Starts `moto_server` (from `pip install "moto[server]"`) on a free port and waits
    /// until it accepts connections.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free port: {e}"));
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("moto_server (pip install -r tests/requirements.txt): {e}"));
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start on {endpoint}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, endpoint }
    }

    /// The AWS environment variables that point a client at this server.
    pub fn env(&self) -> [(&'static str, String); 4] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ]
    }

    /// Runs `tests/python/s3_tool.py` against this server.
    pub fn tool(&self, args: &[&str]) {
        let output = Command::new("python3")
            .arg(workspace_root().join("tests/python/s3_tool.py"))
            .args(args)
            .envs(self.env())
            .output()
            .unwrap_or_else(|e| panic!("s3_tool.py: {e}"));
        assert!(
            output.status.success(),
            "s3_tool.py {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
