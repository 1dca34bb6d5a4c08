//! The real `withloop-server` binary on a free port, driven over HTTP.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{NEG, TestDb};
use serde_json::{Value, json};

/// A running server process, killed when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(database_url: Option<&str>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_withloop-server"));
        cmd.env("WITHLOOP_LISTEN", "127.0.0.1:0").env_remove("DATABASE_URL").env("RUST_LOG", "warn");
        if let Some(url) = database_url {
            cmd.env("DATABASE_URL", url);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start withloop-server");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let address = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("the server did not say where it listens: {first:?}"))
            .to_string();
        assert!(first.contains(if database_url.is_some() { "database" } else { "embedded" }), "{first}");
        // Keep reading standard error so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Server { child, address }
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
        http(&self.address, method, path, body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
fn http(address: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    if body.is_some() {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", payload.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(payload.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

#[test]
fn the_embedded_binary_compiles_and_serves_artifacts() {
    let server = Server::start(None);
    let (status, body) = server.request("GET", "/healthz", None);
    assert_eq!(status, 200);
    assert_eq!(json_of(&body)["mode"], "embedded");
    let request = json!({ "source": NEG, "emit": ["header", "report"] });
    let (status, body) = server.request("POST", "/v1/compile", Some(&request));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let compiled = json_of(&body);
    assert_eq!(compiled["cache"], "miss");
    let (status, header) = server.request("GET", compiled["artifacts"]["header"]["url"].as_str().unwrap(), None);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&header).contains("wl_neg"));
    let (_, again) = server.request("POST", "/v1/compile", Some(&request));
    assert_eq!(json_of(&again)["cache"], "memory");
    let (status, body) = server.request("POST", "/v1/compile", Some(&json!({ "source": "int main() { return x; }" })));
    assert_eq!(status, 422);
    assert_eq!(json_of(&body)["error"]["diagnostics"][0]["at"]["line"], 1);
    let (status, docs) = server.request("GET", "/docs", None);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&docs).contains("/openapi.json"));
}

#[test]
fn a_restarted_binary_serves_identical_bytes_from_postgres() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDb::new());
    let request = json!({ "source": NEG, "file_name": "neg.sac", "emit": ["shared", "report"] });
    let (key, shared) = {
        let server = Server::start(Some(&db.url));
        let (status, body) = server.request("POST", "/v1/compile", Some(&request));
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let compiled = json_of(&body);
        assert_eq!(compiled["cache"], "miss");
        let (status, shared) = server.request("GET", compiled["artifacts"]["shared"]["url"].as_str().unwrap(), None);
        assert_eq!(status, 200);
        (compiled["key"].as_str().unwrap().to_string(), shared)
        // Killed here (SIGKILL): nothing but the database survives.
    };
    let server = Server::start(Some(&db.url));
    let (status, body) = server.request("POST", "/v1/compile", Some(&request));
    assert_eq!(status, 200);
    let compiled = json_of(&body);
    assert_eq!(compiled["cache"], "database");
    assert_eq!(compiled["key"], key.as_str());
    let (_, again) = server.request("GET", &format!("/v1/artifacts/{key}/shared"), None);
    assert_eq!(again, shared, "identical bytes after a restart");
    let (status, ready) = server.request("GET", "/readyz", None);
    assert_eq!(status, 200);
    assert_eq!(json_of(&ready)["mode"], "database");
}
