//! Inode numbers: 1 is the root, 2 the `zram-control` folder, 3 its `hot_add` and 4 its
//! `hot_remove`; the device with id `i` (ids are given in order and never reused while the
//! tree is mounted, see [`crate::export::ExportSet`]) has its folder at `32 (i + 1)`, its
//! `disk` at the next number and its attribute files after that, in [`ATTRS`] order.

use crate::sysfs::ATTRS;

/// The root folder's inode.
pub const ROOT: u64 = 1;
const CONTROL: u64 = 2;
const HOT_ADD: u64 = 3;
const HOT_REMOVE: u64 = 4;
const PER_DEVICE: u64 = 32;
const DISK: u64 = 1;
const _: () = assert!(2 + ATTRS.len() as u64 <= PER_DEVICE);

/// What an inode names: the control folder and its files; device folders, disks and
/// attributes by device id (and attribute index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Root,
    Control,
    HotAdd,
    HotRemove,
    Dir(u64),
    Disk(u64),
    Attr(u64, usize),
}

/// What `ino` names, if anything.
pub fn node(ino: u64) -> Option<Node> {
    match ino {
        ROOT => return Some(Node::Root),
        CONTROL => return Some(Node::Control),
        HOT_ADD => return Some(Node::HotAdd),
        HOT_REMOVE => return Some(Node::HotRemove),
        _ => {}
    }
    let dev = (ino / PER_DEVICE).checked_sub(1)?;
    match ino % PER_DEVICE {
        0 => Some(Node::Dir(dev)),
        DISK => Some(Node::Disk(dev)),
        k if ((k - 2) as usize) < ATTRS.len() => Some(Node::Attr(dev, (k - 2) as usize)),
        _ => None,
    }
}

/// How long the kernel may keep a node's entry and attributes: a second for most; a
/// device's folder and its `disk` are asked again at every use, so that a removed device is
/// gone at once (as under /sys/block) and `disk`'s size is the device's right after `reset`
/// or `disksize` (a `mkfs` right after `disksize`, as scripts run with `/dev/zramN`, saw the
/// old size).
pub fn ttl_of(n: Node) -> std::time::Duration {
    match n {
        Node::Dir(_) | Node::Disk(_) => std::time::Duration::ZERO,
        _ => std::time::Duration::from_secs(1),
    }
}

/// The inode of `n`.
pub fn inode(n: Node) -> u64 {
    match n {
        Node::Root => ROOT,
        Node::Control => CONTROL,
        Node::HotAdd => HOT_ADD,
        Node::HotRemove => HOT_REMOVE,
        Node::Dir(d) => (d + 1) * PER_DEVICE,
        Node::Disk(d) => (d + 1) * PER_DEVICE + DISK,
        Node::Attr(d, a) => (d + 1) * PER_DEVICE + 2 + a as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip() {
        for n in [
            Node::Root,
            Node::Control,
            Node::HotAdd,
            Node::HotRemove,
            Node::Dir(0),
            Node::Disk(0),
            Node::Attr(0, 0),
            Node::Attr(3, ATTRS.len() - 1),
            Node::Dir(1 << 40),
        ] {
            assert_eq!(node(inode(n)), Some(n));
        }
        assert_eq!(node(0), None);
        assert_eq!(node(5), None);
        assert_eq!(node(PER_DEVICE + 2 + ATTRS.len() as u64), None);
    }
}
