//! Who is on the other end of a page connection: the uid that owns the client's loopback
//! TCP socket, read from the kernel's socket table (`/proc/net/tcp`, `tcp6`), as
//! `SO_PEERCRED` names a Unix-socket peer. A page link or session is honoured only from a
//! socket of its own uid, so a link read off another process's command line (`xdg-open`'s
//! argv is world-readable) or a stolen cookie opens nothing for another user.

use std::net::SocketAddr;

/// The kernel's text for `a` as a socket table prints it: each 32-bit word of the address
/// in the machine's byte order, the port in hex.
fn table_key(a: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match a {
        SocketAddr::V4(v) => vec![v.ip().octets()],
        SocketAddr::V6(v) => v
            .ip()
            .octets()
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut s: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    s.push_str(&format!(":{:04X}", a.port()));
    s
}

/// The uid of the socket whose local end is `client` and remote end `server`, in a socket
/// table's text (`/proc/net/tcp` format).
fn uid_in(table: &str, client: &str, server: &str) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid …
        (f.len() > 7 && f[1] == client && f[2] == server)
            .then(|| f[7].parse().ok())
            .flatten()
    })
}

/// The uid owning the client end of the connection `client` → `server`; `None` when the
/// kernel's tables do not show it (then the page refuses: it cannot tell who is asking).
pub fn uid(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    let (c, s) = (table_key(client), table_key(server));
    let file = match client {
        SocketAddr::V4(_) => "/proc/self/net/tcp",
        SocketAddr::V6(_) => "/proc/self/net/tcp6",
    };
    let table = std::fs::read_to_string(file).ok()?;
    uid_in(&table, &c, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_the_kernel_prints_them() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                table_key("127.0.0.1:8080".parse().unwrap()),
                "0100007F:1F90"
            );
            assert_eq!(
                table_key("[::1]:8080".parse().unwrap()),
                "00000000000000000000000001000000:1F90"
            );
        }
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                 0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000   111        0 1 1\n\
                 1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2 1\n";
        assert_eq!(uid_in(t, "0100007F:D431", "0100007F:1F90"), Some(1000));
        assert_eq!(uid_in(t, "0100007F:1F90", "0100007F:D431"), Some(111));
        assert_eq!(uid_in(t, "0100007F:D432", "0100007F:1F90"), None);
    }

    /// A real connection on this machine: the table names this process's uid.
    #[test]
    fn a_real_loopback_connection_is_ours() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(server).unwrap();
        let (_s, client) = l.accept().unwrap();
        assert_eq!(client, c.local_addr().unwrap());
        assert_eq!(uid(client, server), Some(nix::unistd::getuid().as_raw()));
    }
}
