//! Whether an address a component listens on reaches this node's own process, asked of the
//! kernel over rtnetlink. A proof dials where the component's settings say it listens; an
//! address not assigned here (a listener bound with `ip_nonlocal_bind`, a VIP held by the
//! other controller) reaches another host, and a floating address held here now (keepalived's
//! or kube-vip's VIP, StarlingX's floating controller address) may move to the other
//! controller while the proof runs. Both are left out: a proof made only there would be
//! the other node's. When in doubt an address counts as floating: an address left out
//! proves nothing, and a file with nowhere left to be proven restarts its component.

use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// An address assigned to an interface of this node, as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// The address.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// `secondary` (IPv4: a second address in a subnet the interface already has, as
    /// keepalived and StarlingX add a floating address) or `nodad` (IPv6: added without
    /// duplicate address detection, as keepalived adds a VIP).
    pub floating_flag: Option<&'static str>,
}

impl Assigned {
    /// Why this address may float to another node, if it may: its flags, or a host
    /// prefix (`/32`, `/128`: how VIP managers add an address outside the node's subnet).
    pub fn floats(&self) -> Option<String> {
        if let Some(flag) = self.floating_flag {
            return Some(format!("{} is a {flag} address", self.ip));
        }
        let host = match self.ip {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (self.prefix == host).then(|| format!("{} is assigned as /{host}", self.ip))
    }
}

/// Every address assigned on this node (the network namespace this process runs in).
pub fn assigned() -> std::io::Result<Vec<Assigned>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut request = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::from(RouteNetlinkMessage::GetAddress(AddressMessage::default())),
    );
    request.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
    request.header.sequence_number = 1;
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;
    let mut out = Vec::new();
    let mut received = vec![0; 1 << 16];
    loop {
        let size = socket.recv(&mut &mut received[..], 0)?;
        let mut at = 0;
        while at < size {
            let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&received[at..size])
                .map_err(std::io::Error::other)?;
            match message.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => return Err(std::io::Error::other(format!("{e:?}"))),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
                    out.extend(of_message(&a));
                }
                _ => {}
            }
            if message.header.length == 0 {
                break;
            }
            at += message.header.length as usize;
        }
    }
}

fn of_message(a: &AddressMessage) -> Option<Assigned> {
    // IFA_LOCAL is the address itself; IFA_ADDRESS is the peer's on a point-to-point link.
    let ip = (a.attributes.iter())
        .find_map(|x| match x {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        })
        .or_else(|| {
            a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        })?;
    let flags = a.header.flags;
    let nodad = (a.attributes.iter()).any(|x| {
        matches!(x, AddressAttribute::Flags(f)
            if f.contains(netlink_packet_route::address::AddressFlags::Nodad))
    });
    let floating_flag = match () {
        _ if flags.contains(AddressHeaderFlags::Secondary) => Some("secondary"),
        _ if nodad || flags.contains(AddressHeaderFlags::Nodad) => Some("nodad"),
        _ => None,
    };
    Some(Assigned {
        ip,
        prefix: a.header.prefix_len,
        floating_flag,
    })
}

/// Why a proof may not dial an address to reach this node's own process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOwn {
    /// The node's addresses could not be read.
    #[error("the node's addresses cannot be read to tell whether {ip} is its own: {why}")]
    Unread { ip: IpAddr, why: String },
    /// Not assigned here.
    #[error("{0} is not an address of this node (held by another)")]
    Elsewhere(IpAddr),
    /// Assigned here, and may move to another node (why it is taken to float).
    #[error("{0}: a floating address, which may move to another node")]
    Floating(String),
}

/// Whether a proof may dial `ip` to reach this node's own process: loopback always; else
/// only an address assigned here that does not float (see the module documentation).
/// Err says why not.
pub fn reaches_own(ip: IpAddr, assigned: &std::io::Result<Vec<Assigned>>) -> Result<(), NotOwn> {
    if ip.is_loopback() {
        return Ok(());
    }
    let list = assigned.as_ref().map_err(|e| NotOwn::Unread {
        ip,
        why: e.to_string(),
    })?;
    let Some(a) = list.iter().find(|a| a.ip == ip) else {
        return Err(NotOwn::Elsewhere(ip));
    };
    match a.floats() {
        Some(why) => Err(NotOwn::Floating(why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inside a network namespace of its own (`unshare -rn`, as an unprivileged user),
    /// with the addresses a VIP manager adds: the kernel's own flags tell them apart.
    #[test]
    fn floating_and_foreign_addresses_are_told_from_the_nodes_own() {
        if std::env::var_os("CERTRENEWD_OWN_NETNS").is_none() {
            let me = std::env::current_exe().unwrap();
            let script = "set -e; ip link set lo up; \
                ip addr add 10.250.0.1/24 dev lo; ip addr add 10.250.0.2/24 dev lo; \
                ip addr add 10.251.0.9/32 dev lo; ip addr add fd00:250::1/64 dev lo; \
                ip addr add fd00:250::2/64 dev lo nodad; exec \"$0\" \"$@\"";
            let out = std::process::Command::new("unshare")
                .args(["-rn", "sh", "-c", script])
                .arg(me)
                .args([
                    "--exact",
                    "served::own::tests::floating_and_foreign_addresses_are_told_from_the_nodes_own",
                    "--nocapture",
                ])
                .env("CERTRENEWD_OWN_NETNS", "1")
                .output()
                .expect("running unshare (util-linux)");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{text}");
            assert!(
                text.contains("1 passed"),
                "the test ran in the namespace: {text}"
            );
            return;
        }
        let list = assigned();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let lines: Vec<String> = ["127.0.0.1", "::1", "10.250.0.1", "10.250.0.2", "10.251.0.9"]
            .into_iter()
            .chain(["fd00:250::1", "fd00:250::2", "10.252.0.1"])
            .map(|a| match reaches_own(ip(a), &list) {
                Ok(()) => format!("{a}: own"),
                Err(why) => format!("{a}: {why}"),
            })
            .collect();
        assert_eq!(
            lines,
            [
                "127.0.0.1: own",
                "::1: own",
                "10.250.0.1: own",
                "10.250.0.2: 10.250.0.2 is a secondary address: a floating address, which may move to another node",
                "10.251.0.9: 10.251.0.9 is assigned as /32: a floating address, which may move to another node",
                "fd00:250::1: own",
                "fd00:250::2: fd00:250::2 is a nodad address: a floating address, which may move to another node",
                "10.252.0.1: 10.252.0.1 is not an address of this node (held by another)",
            ],
            "{list:?}"
        );
    }
}
