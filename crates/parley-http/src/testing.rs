//! What the crate's tests share: their scripted servers read a request the same way.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Reads one request from `socket` (its head, then `content-length` bytes of body) and takes it
/// off the front of `buffer`, which keeps whatever came after it; `None` once the connection
/// ended (or failed) first.
pub(crate) async fn read_request(socket: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let (head, length) = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (end + 4, length);
        }
        if socket.read_buf(buffer).await.unwrap_or(0) == 0 {
            return None;
        }
    };
    while buffer.len() < head + length {
        if socket.read_buf(buffer).await.unwrap_or(0) == 0 {
            return None;
        }
    }
    Some(buffer.drain(..head + length).collect())
}
