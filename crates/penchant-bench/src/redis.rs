//! The Redis references' plumbing: a `redis-server` child on a free loopback port
//! ([`RedisServer`]) and a minimal blocking RESP2 client ([`Resp`]), so that the benchmarks
//! compare with Redis without a Redis crate. [`find_on_path`] finds the default binary;
//! `scripts/redis-server.sh` installs Debian's and prints its path.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// An executable called `name` in a directory of `PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What a [`RedisServer`] keeps on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Persistence {
    /// Nothing: no RDB snapshots, no append-only file.
    None,
    /// Every write appended to the AOF and fsynced before its reply (`--appendonly yes
    /// --appendfsync always`), no RDB snapshots: Redis's most durable setting.
    AofAlways,
}

/// A `redis-server` child on a free loopback port, its files in a temporary directory; killed
/// on drop.
#[derive(Debug)]
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start `path` with `persistence`, its directory (AOF, log) a new temporary directory in
    /// `parent` (default: the system's), and wait until it answers PING.
    pub(crate) fn start(
        path: &Path,
        persistence: Persistence,
        parent: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let dir = match parent {
            Some(parent) => tempfile::tempdir_in(parent)?,
            None => tempfile::tempdir()?,
        };
        // A free port: bind port 0, note the port, let it go for redis-server.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let persistence_args: &[&str] = match persistence {
            Persistence::None => &["--save", "", "--appendonly", "no"],
            Persistence::AofAlways => &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        };
        let child = Command::new(path)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(persistence_args)
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", path.display()))?;
        let mut server = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before answering PING: {}",
                    path.display(),
                    server.log_tail()
                );
            }
            let ping = server
                .connect()
                .and_then(|mut conn| conn.command(&[b"PING"]));
            match ping {
                Ok(Reply::Simple(s)) if s == "PONG" => return Ok(server),
                _ if Instant::now() > deadline => bail!(
                    "{} did not answer PING on port {port} within 10 s: {}",
                    path.display(),
                    server.log_tail()
                ),
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// A new connection (Nagle off).
    pub(crate) fn connect(&self) -> anyhow::Result<Resp> {
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_nodelay(true)?;
        let reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
        Ok(Resp { stream, reader })
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's directory (its AOF and log).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of the server's log, for error messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        if lines.is_empty() {
            return "(nothing in its log)".into();
        }
        lines[lines.len().saturating_sub(5)..].join(" / ")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A RESP2 reply (errors are returned as `Err`; the commands used here answer no arrays).
#[derive(Debug)]
pub(crate) enum Reply {
    Simple(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// Append one command, as a RESP array of bulk strings, to `buf`.
pub(crate) fn encode_command(buf: &mut Vec<u8>, args: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// A tiny blocking RESP client on one connection: single commands, or pipelines of commands
/// already encoded.
#[derive(Debug)]
pub(crate) struct Resp {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Resp {
    /// Send one command and read its reply.
    pub(crate) fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut buf = Vec::new();
        encode_command(&mut buf, args);
        self.stream.write_all(&buf)?;
        self.read_reply()
    }

    /// Write `commands` commands already encoded in `buf` (from another thread, so that neither
    /// side blocks on a full socket buffer) while reading their replies, each passed to `check`.
    pub(crate) fn pipeline(
        &mut self,
        buf: &[u8],
        commands: usize,
        mut check: impl FnMut(Reply) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut writer = self.stream.try_clone()?;
        std::thread::scope(|scope| {
            let written = scope.spawn(move || writer.write_all(buf));
            let mut read = || -> anyhow::Result<()> {
                for _ in 0..commands {
                    check(self.read_reply()?)?;
                }
                Ok(())
            };
            let read = read();
            written.join().expect("writer thread panicked")?;
            read
        })
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            bail!("redis-server closed the connection");
        }
        let line = line
            .strip_suffix("\r\n")
            .context("RESP line without CRLF")?;
        Ok(line.to_owned())
    }

    /// Read one reply; a Redis error reply is an `Err`.
    fn read_reply(&mut self) -> anyhow::Result<Reply> {
        let line = self.read_line()?;
        let (kind, rest) = line.split_at_checked(1).context("empty RESP line")?;
        Ok(match kind {
            "+" => Reply::Simple(rest.to_owned()),
            "-" => bail!("redis: {rest}"),
            ":" => Reply::Integer(rest.parse()?),
            "$" => {
                let len: i64 = rest.parse()?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut data = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut data)?;
                    anyhow::ensure!(data.ends_with(b"\r\n"), "bulk string without CRLF");
                    data.truncate(len as usize);
                    Reply::Bulk(Some(data))
                }
            }
            "*" => {
                let len: i64 = rest.parse()?;
                let mut items = Vec::with_capacity(len.max(0) as usize);
                for _ in 0..len.max(0) {
                    items.push(self.read_reply()?);
                }
                Reply::Array(items)
            }
            _ => bail!("unexpected RESP reply: {line}"),
        })
    }
}
