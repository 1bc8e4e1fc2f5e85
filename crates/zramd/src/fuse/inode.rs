//! Inode numbers: 1 is the root; device `i` has its folder at `32 (i + 1)`, its `disk` at
//! the next number and its attribute files after that, in [`ATTRS`] order.

use crate::sysfs::ATTRS;

/// The root folder's inode.
pub const ROOT: u64 = 1;
const PER_DEVICE: u64 = 32;
const DISK: u64 = 1;
const _: () = assert!(2 + ATTRS.len() as u64 <= PER_DEVICE);

/// What an inode names: device folders, disks and attributes by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Root,
    Dir(usize),
    Disk(usize),
    Attr(usize, usize),
}

/// What `ino` names, if anything.
pub fn node(ino: u64) -> Option<Node> {
    if ino == ROOT {
        return Some(Node::Root);
    }
    let dev = usize::try_from(ino / PER_DEVICE).ok()?.checked_sub(1)?;
    match ino % PER_DEVICE {
        0 => Some(Node::Dir(dev)),
        DISK => Some(Node::Disk(dev)),
        k if ((k - 2) as usize) < ATTRS.len() => Some(Node::Attr(dev, (k - 2) as usize)),
        _ => None,
    }
}

/// The inode of `n`.
pub fn inode(n: Node) -> u64 {
    match n {
        Node::Root => ROOT,
        Node::Dir(d) => (d as u64 + 1) * PER_DEVICE,
        Node::Disk(d) => (d as u64 + 1) * PER_DEVICE + DISK,
        Node::Attr(d, a) => (d as u64 + 1) * PER_DEVICE + 2 + a as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip() {
        for n in [
            Node::Root,
            Node::Dir(0),
            Node::Disk(0),
            Node::Attr(0, 0),
            Node::Attr(3, ATTRS.len() - 1),
        ] {
            assert_eq!(node(inode(n)), Some(n));
        }
        assert_eq!(node(0), None);
        assert_eq!(node(PER_DEVICE + 2 + ATTRS.len() as u64), None);
    }
}
