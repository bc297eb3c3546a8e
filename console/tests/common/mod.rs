//! The console under test: `sigbox-ui` as a process on a free port, a plain HTTP/1.1 client
//! over TCP (so that a test can send any `Host`, `Origin` or cookie it likes), a
//! Server-Sent Events reader, and the `sigbox` CLI.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running `sigbox-ui`, killed when dropped.
pub struct Ui {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its access token.
    pub token: String,
    /// The first line it printed.
    pub url: String,
    /// What it wrote on stderr, read once it exits (see [`Ui::stop`]).
    stderr: Option<std::process::ChildStderr>,
}

impl Ui {
    /// Starts the console on `roots`, with `extra` arguments (`--listen` defaults to a free
    /// loopback port).
    pub fn start(roots: &[&Path], extra: &[&str]) -> Ui {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sigbox-ui"));
        for r in roots {
            cmd.arg("--root").arg(r);
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(extra)
            .arg("--settle")
            .arg("0")
            .env("SIGBOX_DURABILITY", "relaxed")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sigbox-ui starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(url.starts_with("http://"), "first line: {url:?}");
        let (addr, token) = url
            .trim_start_matches("http://")
            .split_once("/?token=")
            .expect("the URL carries the token");
        let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        let stderr = child.stderr.take();
        Ui {
            child,
            port,
            token: token.to_string(),
            url,
            stderr,
        }
    }

    /// Stops it; what it wrote on stderr.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// `Host` as a browser on this machine writes it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The console's origin.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(&self) -> (String, String) {
        ("Authorization".into(), format!("Bearer {}", self.token))
    }

    /// A request with the right `Host` unless `headers` name one.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Option<&str>,
    ) -> Response {
        http(self.port, method, path, headers, body, Some(&self.host()))
    }

    /// `GET path` with the bearer token.
    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[self.bearer()], None)
    }

    /// `POST /api/send` as a script does: bearer token, JSON, no `Origin`.
    pub fn send(&self, body: &str) -> Response {
        self.request(
            "POST",
            "/api/send",
            &[
                self.bearer(),
                ("Content-Type".into(), "application/json".into()),
            ],
            Some(body),
        )
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request on a new connection (`Connection: close`); `host` is sent as `Host`
/// unless `headers` name one.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<&str>,
    host: Option<&str>,
) -> Response {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host"))
        && let Some(h) = host
    {
        req.push_str(&format!("Host: {h}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if method != "GET" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    // Up to the end of the body its length or its last chunk says, or the end of the stream:
    // a server may keep the connection open after all.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if complete(&raw) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }
    parse_response(&raw)
}

/// True when `raw` holds a whole response.
fn complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    if let Some(n) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
    {
        return body.len() >= n;
    }
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    false
}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A Server-Sent Events client of `/api/events`.
pub struct Events {
    reader: BufReader<TcpStream>,
}

impl Events {
    /// Connects with the bearer token; returns once the `hello` event came.
    pub fn connect(ui: &Ui) -> Events {
        let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
        write!(
            s,
            "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: \
             text/event-stream\r\n\r\n",
            ui.host(),
            ui.token
        )
        .unwrap();
        let mut ev = Events {
            reader: BufReader::new(s),
        };
        let (name, _) = ev.next(Duration::from_secs(30)).expect("the hello event");
        assert_eq!(name, "hello");
        ev
    }

    /// The next event (its name and data), or `None` when `timeout` passes first.
    pub fn next(&mut self, timeout: Duration) -> Option<(String, String)> {
        let deadline = Instant::now() + timeout;
        let (mut name, mut data) = (String::new(), String::new());
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.reader
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(_) => return None,
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            } else if line.is_empty() && !name.is_empty() {
                return Some((name, data));
            }
        }
    }

    /// Waits for a `change` event whose data satisfies `f`; its data as JSON.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let (name, data) = self.next(left)?;
            if name != "change" {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&data).unwrap();
            if f(&v) {
                return Some(v);
            }
        }
    }
}

/// The `sigbox` CLI beside `sigbox-ui` (built when missing).
pub fn sigbox_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_sigbox-ui")).with_file_name("sigbox");
    if !bin.exists() {
        let ok = Command::new(env!("CARGO"))
            .args(["build", "-p", "sigbox-client", "--bin", "sigbox"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot build the sigbox CLI");
    }
    bin
}

/// Runs `sigbox --root ROOT ARGS` (relaxed durability, no settle window).
pub fn sigbox(root: &Path, args: &[&str]) -> Output {
    Command::new(sigbox_bin())
        .arg("--root")
        .arg(root)
        .args(["--settle", "0"])
        .args(args)
        .env("SIGBOX_DURABILITY", "relaxed")
        .env_remove("SIGBOX_ROOT")
        .output()
        .unwrap()
}

/// `sigbox send` that must succeed: the id it printed.
pub fn send_cli(root: &Path, args: &[&str]) -> String {
    let mut all = vec!["send"];
    all.extend_from_slice(args);
    let out = sigbox(root, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A fresh mailbox in a temporary directory.
pub fn mailbox() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("signals");
    let out = sigbox(&root, &["init"]);
    assert!(out.status.success());
    (dir, root)
}

/// The names in `dir`.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
