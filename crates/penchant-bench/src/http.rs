//! A minimal blocking HTTP/1.1 client on one keep-alive connection, for read loops measured
//! beside Redis: the Redis reference's client ([`crate::redis::Resp`]) is as thin, so the two
//! figures compare the servers rather than the clients (a `reqwest` client in the same
//! process costs about as much CPU per request as the server).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use anyhow::{Context, bail};

/// One connection; requests are sent one after the other.
#[derive(Debug)]
pub(crate) struct RawHttp {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    /// The header lines sent with every request, each ending in CRLF.
    headers: String,
    /// The last response's body.
    body: Vec<u8>,
}

impl RawHttp {
    /// Connect (Nagle off); `headers` are (name, value) pairs sent with every request.
    pub(crate) fn connect(addr: SocketAddr, headers: &[(&str, &str)]) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
        let mut lines = format!("Host: {addr}\r\n");
        for (name, value) in headers {
            lines.push_str(&format!("{name}: {value}\r\n"));
        }
        Ok(Self {
            stream,
            reader,
            headers: lines,
            body: Vec::new(),
        })
    }

    /// `GET path`; the body of a 2xx answer, or an error with the status and body.
    pub(crate) fn get(&mut self, path: &str) -> anyhow::Result<&[u8]> {
        let request = format!("GET {path} HTTP/1.1\r\n{}\r\n", self.headers);
        self.send(path, request.as_bytes())
    }

    /// `POST path` with a JSON body; the body of a 2xx answer, or an error.
    pub(crate) fn post(&mut self, path: &str, body: &[u8]) -> anyhow::Result<&[u8]> {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.headers,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.send(path, &request)
    }

    fn send(&mut self, path: &str, request: &[u8]) -> anyhow::Result<&[u8]> {
        self.stream.write_all(request)?;
        let mut line = String::new();
        self.read_line(&mut line)?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{path}: bad status line {line:?}"))?;
        let mut length = None;
        loop {
            line.clear();
            self.read_line(&mut line)?;
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let length = length.with_context(|| format!("{path}: no Content-Length in the answer"))?;
        self.body.resize(length, 0);
        self.reader.read_exact(&mut self.body)?;
        if !(200..300).contains(&status) {
            bail!("{path}: {status} {}", String::from_utf8_lossy(&self.body));
        }
        Ok(&self.body)
    }

    fn read_line(&mut self, line: &mut String) -> anyhow::Result<()> {
        if self.reader.read_line(line)? == 0 {
            bail!("the server closed the connection");
        }
        Ok(())
    }
}
