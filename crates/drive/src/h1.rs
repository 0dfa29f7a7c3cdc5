//! A lean HTTP/1.1 keep-alive client. [`Response`] reads a response without doing I/O: it is
//! fed the bytes received so far, parses the head in place with `httparse`, and skips the body
//! (Content-Length, chunked, or until close) without copying, saying how many bytes it used.
//! The event loop (`evloop`) feeds it from non-blocking sockets; [`Conn`] is the same over a
//! tokio stream (HTTP/1.1 in the tokio engine, and the fuzz target's replay). A request is
//! written as one buffer.

use std::future::Future;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::client::ErrKind;

const MAX_HEADERS: usize = 64;
pub(crate) const READ_CHUNK: usize = 16 * 1024;
const MAX_HEAD: usize = 64 * 1024;

/// Where a response being read stands.
#[derive(Clone, Copy, Debug)]
enum Stage {
    Head,
    /// This many body bytes are still to come.
    Length(usize),
    /// A chunk-size line is next.
    ChunkSize,
    /// This many bytes of chunk data and its CRLF are still to come.
    ChunkData(usize),
    /// Trailer lines, up to an empty one.
    Trailers,
    /// Everything up to the server's close.
    UntilClose,
}

/// What [`Response::feed`] made of the bytes it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    /// More bytes are needed; the first `used` of those given are consumed (the rest, a line
    /// or head not yet complete, must be given again with what follows).
    More { used: usize },
    /// The response is complete after the first `used` bytes.
    Done { used: usize, status: u16 },
}

/// One response being read, fed the bytes as they arrive.
#[derive(Debug)]
pub(crate) struct Response {
    stage: Stage,
    status: u16,
    head_request: bool,
    /// The server announced (or HTTP/1.0 implies) a close: the connection must not be reused.
    pub close: bool,
}

impl Response {
    /// A response to a request; `head_request` says it has no body.
    pub fn new(head_request: bool) -> Response {
        Response {
            stage: Stage::Head,
            status: 0,
            head_request,
            close: false,
        }
    }

    /// Reads what it can of `buf`, the bytes received and not yet used.
    pub fn feed(&mut self, buf: &[u8]) -> Result<Fed, ErrKind> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            match self.stage {
                Stage::Head => match self.head(rest)? {
                    Some(n) => used += n,
                    None => return Ok(Fed::More { used }),
                },
                Stage::Length(n) => {
                    let take = n.min(rest.len());
                    used += take;
                    if take < n {
                        self.stage = Stage::Length(n - take);
                        return Ok(Fed::More { used });
                    }
                    return Ok(self.done(used));
                }
                Stage::ChunkSize => {
                    let Some(line) = line(rest)? else {
                        return Ok(Fed::More { used });
                    };
                    used += line + 2;
                    let size = chunk_size(&rest[..line])?;
                    self.stage = if size == 0 {
                        Stage::Trailers
                    } else {
                        // The chunk and its CRLF; a size that overflows is a malformed response.
                        Stage::ChunkData(size.checked_add(2).ok_or(ErrKind::Http)?)
                    };
                }
                Stage::ChunkData(n) => {
                    let take = n.min(rest.len());
                    used += take;
                    if take < n {
                        self.stage = Stage::ChunkData(n - take);
                        return Ok(Fed::More { used });
                    }
                    self.stage = Stage::ChunkSize;
                }
                Stage::Trailers => {
                    let Some(line) = line(rest)? else {
                        return Ok(Fed::More { used });
                    };
                    used += line + 2;
                    if line == 0 {
                        return Ok(self.done(used));
                    }
                }
                Stage::UntilClose => return Ok(Fed::More { used: buf.len() }),
            }
        }
    }

    /// The server closed the connection: the response's end when its body runs until the
    /// close, else a reset.
    pub fn closed(&self) -> Result<u16, ErrKind> {
        match self.stage {
            Stage::UntilClose => Ok(self.status),
            _ => Err(ErrKind::Reset),
        }
    }

    fn done(&mut self, used: usize) -> Fed {
        self.stage = Stage::Head;
        Fed::Done {
            used,
            status: self.status,
        }
    }

    /// Parses a complete head at the start of `buf`: its length, or `None` when it is not
    /// complete yet. An interim 1xx response goes back to reading a head.
    fn head(&mut self, buf: &[u8]) -> Result<Option<usize>, ErrKind> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let head_len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err(ErrKind::Http),
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(ErrKind::Http),
        };
        let status = resp.code.unwrap_or(0);
        let mut body = Stage::UntilClose;
        let mut close = resp.version == Some(0);
        let mut chunked = false;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or(ErrKind::Http)?;
                body = Stage::Length(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .windows(7)
                    .any(|w| w.eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                if h.value.windows(5).any(|w| w.eq_ignore_ascii_case(b"close")) {
                    close = true;
                } else if h
                    .value
                    .windows(10)
                    .any(|w| w.eq_ignore_ascii_case(b"keep-alive"))
                {
                    close = false;
                }
            }
        }
        if chunked {
            body = Stage::ChunkSize;
        }
        let interim = (100..200).contains(&status);
        if self.head_request || status == 204 || status == 304 || interim {
            body = Stage::Length(0);
        }
        if matches!(body, Stage::UntilClose) {
            close = true;
        }
        self.close |= close;
        self.status = status;
        // An interim 1xx response is followed by the real one.
        self.stage = if interim { Stage::Head } else { body };
        Ok(Some(head_len))
    }
}

/// The length of the CRLF-terminated line at the start of `buf` (without the CRLF), `None`
/// when it is not complete yet.
fn line(buf: &[u8]) -> Result<Option<usize>, ErrKind> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(i)),
        None if buf.len() > MAX_HEAD => Err(ErrKind::Http),
        None => Ok(None),
    }
}

/// A chunk-size line's size (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<usize, ErrKind> {
    let text = std::str::from_utf8(line).map_err(|_| ErrKind::Http)?;
    let size_text = text.split(';').next().unwrap_or("").trim();
    usize::from_str_radix(size_text, 16).map_err(|_| ErrKind::Http)
}

/// Makes room at the end of a receive buffer whose unused bytes are `buf[pos..len]`: starts
/// over when all were used, else moves them to the front, or grows it when they fill it.
pub(crate) fn make_room(buf: &mut Vec<u8>, pos: &mut usize, len: &mut usize) {
    if *pos == *len {
        *pos = 0;
        *len = 0;
    }
    if *len == buf.len() {
        if *pos > 0 {
            buf.copy_within(*pos..*len, 0);
            *len -= *pos;
            *pos = 0;
        } else {
            let grown = buf.len() * 2;
            buf.resize(grown, 0);
        }
    }
}

/// One keep-alive connection over a plain TCP or a TLS stream.
pub(crate) struct Conn<S> {
    stream: S,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[pos..len]`.
    pos: usize,
    len: usize,
    /// The server announced or performed a close; the connection must not be reused.
    pub closed: bool,
}

pub(crate) fn io_kind(e: &std::io::Error) -> ErrKind {
    match e.kind() {
        std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::UnexpectedEof => ErrKind::Reset,
        k => ErrKind::Io(k),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Wraps a connected stream.
    pub fn new(stream: S) -> Conn<S> {
        Conn {
            stream,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            len: 0,
            closed: false,
        }
    }

    /// Reads more bytes; returns false at the end of the stream.
    async fn fill(&mut self) -> Result<bool, ErrKind> {
        make_room(&mut self.buf, &mut self.pos, &mut self.len);
        let n = self
            .stream
            .read(&mut self.buf[self.len..])
            .await
            .map_err(|e| io_kind(&e))?;
        self.len += n;
        Ok(n > 0)
    }

    /// Sends `request` (a complete HTTP/1.1 request) and reads the whole response.
    /// Returns the status code. `head_request` says the response has no body.
    pub async fn exchange(&mut self, request: &[u8], head_request: bool) -> Result<u16, ErrKind> {
        let r = self.exchange_inner(request, head_request).await;
        if r.is_err() {
            self.closed = true;
        }
        r
    }

    async fn exchange_inner(&mut self, request: &[u8], head_request: bool) -> Result<u16, ErrKind> {
        if self.pos != self.len {
            // Bytes nobody asked for: the stream is out of sync.
            return Err(ErrKind::Http);
        }
        self.pos = 0;
        self.len = 0;
        self.stream
            .write_all(request)
            .await
            .map_err(|e| io_kind(&e))?;
        let mut response = Response::new(head_request);
        loop {
            match response.feed(&self.buf[self.pos..self.len])? {
                Fed::Done { used, status } => {
                    self.pos += used;
                    self.closed |= response.close;
                    return Ok(status);
                }
                Fed::More { used } => self.pos += used,
            }
            if !self.fill().await? {
                self.closed = true;
                let status = response.closed()?;
                self.pos = self.len;
                return Ok(status);
            }
        }
    }
}

/// Builds the bytes of one request.
pub(crate) fn build_request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(b) = body {
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", b.len()).as_bytes());
        out.extend_from_slice(b);
    } else if method != "GET" && method != "HEAD" {
        out.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    } else {
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The server's side of a replayed connection: each request written releases the next of
/// `responses`, which is then handed out `step` bytes per read (so that every place a response
/// can be cut is reached); bytes a response leaves unread stay in front of the next one.
struct Replay<'a> {
    responses: std::slice::Iter<'a, &'a [u8]>,
    pending: std::collections::VecDeque<u8>,
    step: usize,
}

impl AsyncRead for Replay<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.step.min(self.pending.len()).min(out.remaining());
        let bytes: Vec<u8> = self.pending.drain(..n).collect();
        out.put_slice(&bytes);
        std::task::Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Replay<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if let Some(r) = self.responses.next() {
            self.pending.extend(r.iter());
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Replays `responses` as what a server sent on one keep-alive connection, one after each
/// request, `step` bytes per read, and runs GET (or HEAD) exchanges until one fails, the
/// connection closes or the responses run out: the status of each exchange, or the failure
/// that ended them (as text). The fuzz target of the response parser; every read is ready at
/// once (the end of the bytes reads as a close), so no runtime is needed.
pub fn replay(responses: &[&[u8]], step: usize, head_request: bool) -> Vec<Result<u16, String>> {
    let mut conn = Conn::new(Replay {
        responses: responses.iter(),
        pending: std::collections::VecDeque::new(),
        step: step.max(1),
    });
    let request = build_request(
        if head_request { "HEAD" } else { "GET" },
        "/",
        "h",
        &[],
        None,
    );
    let mut out = Vec::new();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in responses {
        let polled = {
            let mut exchange = std::pin::pin!(conn.exchange(&request, head_request));
            exchange.as_mut().poll(&mut cx)
        };
        let std::task::Poll::Ready(r) = polled else {
            out.push(Err(
                "the exchange waited on a stream that is always ready".into()
            ));
            break;
        };
        let end = r.is_err() || conn.closed;
        out.push(r.map_err(|e| format!("{e:?}")));
        if end {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::net::TcpStream;

    async fn connect(addr: SocketAddr) -> Conn<TcpStream> {
        Conn::new(TcpStream::connect(addr).await.unwrap())
    }

    /// A server that answers each request with the next canned response.
    async fn canned(responses: Vec<&'static [u8]>) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            for r in responses {
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.write_all(r).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn length_chunked_interim_and_close() {
        let addr = canned(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n",
            b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        ])
        .await;
        let mut c = connect(addr).await;
        let req = build_request("GET", "/", "h", &[], None);
        assert_eq!(c.exchange(&req, false).await, Ok(200));
        assert_eq!(c.exchange(&req, false).await, Ok(404));
        assert!(!c.closed);
        assert_eq!(c.exchange(&req, false).await, Ok(503));
        assert!(c.closed);
    }

    #[tokio::test]
    async fn truncated_and_garbage_responses_are_errors() {
        let addr = canned(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort"]).await;
        let mut c = connect(addr).await;
        let req = build_request("GET", "/", "h", &[], None);
        assert_eq!(c.exchange(&req, false).await, Err(ErrKind::Reset));
        let addr = canned(vec![b"SMTP ready\r\n\r\n"]).await;
        let mut c = connect(addr).await;
        assert_eq!(c.exchange(&req, false).await, Err(ErrKind::Http));
    }

    #[test]
    fn a_replayed_connection_reads_responses_cut_at_every_byte() {
        let responses: [&[u8]; 2] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 404 No\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ];
        for step in [1, 2, 7, 4096] {
            assert_eq!(
                replay(&responses, step, false),
                vec![Ok(200), Ok(404)],
                "step {step}"
            );
        }
    }

    #[test]
    fn a_chunk_size_that_overflows_is_a_malformed_response() {
        let r: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
        assert_eq!(replay(&[r], 64, false), vec![Err("Http".to_string())]);
    }

    #[test]
    fn bytes_a_response_did_not_announce_put_the_connection_out_of_sync() {
        let responses: [&[u8]; 2] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ];
        assert_eq!(
            replay(&responses, 4096, false),
            vec![Ok(200), Err("Http".to_string())]
        );
    }

    #[test]
    fn request_bytes() {
        let r = build_request(
            "POST",
            "/p?q=1",
            "h:1",
            &[("A".into(), "b".into())],
            Some(b"xy"),
        );
        assert_eq!(
            r,
            b"POST /p?q=1 HTTP/1.1\r\nHost: h:1\r\nA: b\r\nContent-Length: 2\r\n\r\nxy"
        );
        assert_eq!(
            build_request("GET", "/", "h", &[], None),
            b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
        );
    }
}
