//! A crash model of the filesystem seam, after redb's live/durable crash backend.
//!
//! [`Recorder`] is an [`FsHook`]: it records every effect that succeeds and, once armed,
//! freezes the filesystem at the n-th effect (that one and every later one fail), which is
//! what a process sees of a crash. [`Model`] replays the recorded effects over a snapshot of the
//! starting tree and keeps, for every directory, its live entries and the entries as of its last
//! fsync, and for every file its live data and its data as of its last fsync. [`Model::durable`]
//! writes out what a crash at that moment may leave under the POSIX-conservative rules: each
//! directory as of its last fsync, each file's data as of its last fsync (empty when never
//! synced).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sigbox::{FsHook, FsOp};

/// An effect, owned.
#[derive(Clone, Debug)]
pub enum Op {
    /// mkdir
    CreateDir(PathBuf),
    /// create a new file
    CreateFile(PathBuf),
    /// append data
    Write(PathBuf, Vec<u8>),
    /// replace the data from an offset to the end
    ReplaceTail(PathBuf, u64, Vec<u8>),
    /// fsync a file
    SyncFile(PathBuf),
    /// rename
    Rename(PathBuf, PathBuf),
    /// link: a second name for a file
    Link(PathBuf, PathBuf),
    /// fsync a directory
    SyncDir(PathBuf),
    /// unlink
    Remove(PathBuf),
}

/// Records effects; freezes at effect number `freeze_at` when set.
#[derive(Default)]
pub struct Recorder {
    ops: Mutex<Vec<Op>>,
    seen: AtomicUsize,
    freeze_at: Option<usize>,
}

impl Recorder {
    /// A recorder that never freezes.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// A recorder that fails effect number `n` (0-based) and every later one.
    pub fn freezing_at(n: usize) -> Recorder {
        Recorder {
            freeze_at: Some(n),
            ..Recorder::default()
        }
    }

    /// How many effects were attempted.
    pub fn attempted(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }

    /// The effects that succeeded, in order.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

impl FsHook for Recorder {
    fn before(&self, _op: &FsOp<'_>) -> io::Result<()> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        if self.freeze_at.is_some_and(|f| n >= f) {
            return Err(io::Error::other("simulated crash: filesystem frozen"));
        }
        Ok(())
    }

    fn after(&self, op: &FsOp<'_>, ok: bool) {
        if !ok {
            return;
        }
        let op = match *op {
            FsOp::CreateDir(p) => Op::CreateDir(p.into()),
            FsOp::CreateFile(p) => Op::CreateFile(p.into()),
            FsOp::Write(p, d) => Op::Write(p.into(), d.to_vec()),
            FsOp::ReplaceTail(p, at, d) => Op::ReplaceTail(p.into(), at, d.to_vec()),
            FsOp::SyncFile(p) => Op::SyncFile(p.into()),
            FsOp::Rename { from, to, .. } => Op::Rename(from.into(), to.into()),
            FsOp::Link { from, to } => Op::Link(from.into(), to.into()),
            FsOp::SyncDir(p) => Op::SyncDir(p.into()),
            FsOp::Remove(p) => Op::Remove(p.into()),
            // Modes and times are not part of the crash model: they do not decide what
            // survives.
            FsOp::SetMode(..) | FsOp::Touch(..) => return,
            // Presence lock files do not survive a crash by design: not part of the model.
            FsOp::OpenLock(..) => return,
            ref other => panic!("the crash model does not know {other:?}"),
        };
        self.ops.lock().unwrap().push(op);
    }
}

#[derive(Clone, Debug)]
enum Node {
    Dir {
        live: BTreeMap<OsString, usize>,
        durable: BTreeMap<OsString, usize>,
    },
    File {
        live: Vec<u8>,
        durable: Option<Vec<u8>>,
    },
}

/// Live and durable state of a directory tree.
#[derive(Clone, Debug)]
pub struct Model {
    root: PathBuf,
    nodes: Vec<Node>,
}

impl Model {
    /// Snapshots the tree at `root`, all of it durable (as after a full sync).
    pub fn snapshot(root: &Path) -> Model {
        let mut m = Model {
            root: root.to_path_buf(),
            nodes: Vec::new(),
        };
        m.load(root);
        m
    }

    fn load(&mut self, path: &Path) -> usize {
        let meta = std::fs::symlink_metadata(path).unwrap();
        if meta.is_dir() {
            let id = self.nodes.len();
            self.nodes.push(Node::Dir {
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
            });
            let mut entries = BTreeMap::new();
            for e in std::fs::read_dir(path).unwrap() {
                let e = e.unwrap();
                let child = self.load(&e.path());
                entries.insert(e.file_name(), child);
            }
            self.nodes[id] = Node::Dir {
                live: entries.clone(),
                durable: entries,
            };
            id
        } else {
            let data = std::fs::read(path).unwrap();
            self.nodes.push(Node::File {
                live: data.clone(),
                durable: Some(data),
            });
            self.nodes.len() - 1
        }
    }

    fn rel(&self, p: &Path) -> Vec<OsString> {
        let rel = p
            .strip_prefix(&self.root)
            .unwrap_or_else(|_| panic!("{} is outside the model's root", p.display()));
        rel.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                _ => None,
            })
            .collect()
    }

    fn lookup(&self, parts: &[OsString]) -> Option<usize> {
        let mut id = 0;
        for part in parts {
            match &self.nodes[id] {
                Node::Dir { live, .. } => id = *live.get(part)?,
                Node::File { .. } => return None,
            }
        }
        Some(id)
    }

    fn parent_and_name(&self, p: &Path) -> (usize, OsString) {
        let mut parts = self.rel(p);
        let name = parts.pop().expect("not the root");
        let parent = self
            .lookup(&parts)
            .unwrap_or_else(|| panic!("parent of {} missing in model", p.display()));
        (parent, name)
    }

    fn live_mut(&mut self, dir: usize) -> &mut BTreeMap<OsString, usize> {
        match &mut self.nodes[dir] {
            Node::Dir { live, .. } => live,
            Node::File { .. } => panic!("not a directory"),
        }
    }

    /// Applies one recorded effect.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::CreateDir(p) => {
                let (parent, name) = self.parent_and_name(p);
                let id = self.nodes.len();
                self.nodes.push(Node::Dir {
                    live: BTreeMap::new(),
                    durable: BTreeMap::new(),
                });
                self.live_mut(parent).insert(name, id);
            }
            Op::CreateFile(p) => {
                let (parent, name) = self.parent_and_name(p);
                let id = self.nodes.len();
                self.nodes.push(Node::File {
                    live: Vec::new(),
                    durable: None,
                });
                self.live_mut(parent).insert(name, id);
            }
            Op::Write(p, data) => {
                let id = self.lookup(&self.rel(p)).expect("write to a missing file");
                if let Node::File { live, .. } = &mut self.nodes[id] {
                    live.extend_from_slice(data);
                }
            }
            Op::ReplaceTail(p, at, data) => {
                let id = self.lookup(&self.rel(p)).expect("write to a missing file");
                if let Node::File { live, .. } = &mut self.nodes[id] {
                    live.truncate(usize::try_from(*at).expect("an offset in memory"));
                    live.extend_from_slice(data);
                }
            }
            Op::SyncFile(p) => {
                let id = self.lookup(&self.rel(p)).expect("fsync of a missing file");
                if let Node::File { live, durable } = &mut self.nodes[id] {
                    *durable = Some(live.clone());
                }
            }
            Op::Rename(from, to) => {
                let (fp, fname) = self.parent_and_name(from);
                let id = self
                    .live_mut(fp)
                    .remove(&fname)
                    .expect("rename of a missing entry");
                let (tp, tname) = self.parent_and_name(to);
                self.live_mut(tp).insert(tname, id);
            }
            Op::Link(from, to) => {
                let (fp, fname) = self.parent_and_name(from);
                let id = *self
                    .live_mut(fp)
                    .get(&fname)
                    .expect("link of a missing entry");
                let (tp, tname) = self.parent_and_name(to);
                self.live_mut(tp).insert(tname, id);
            }
            Op::SyncDir(p) => {
                let id = self
                    .lookup(&self.rel(p))
                    .expect("fsync of a missing directory");
                if let Node::Dir { live, durable } = &mut self.nodes[id] {
                    *durable = live.clone();
                }
            }
            Op::Remove(p) => {
                let (parent, name) = self.parent_and_name(p);
                self.live_mut(parent).remove(&name);
            }
        }
    }

    /// The directories below `path` (itself included) as they are now, for a test that syncs
    /// what other processes would.
    pub fn live_dirs(&self, path: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Some(id) = self.lookup(&self.rel(path)) else {
            return out;
        };
        let mut todo = vec![(id, path.to_path_buf())];
        while let Some((id, p)) = todo.pop() {
            if let Node::Dir { live, .. } = &self.nodes[id] {
                out.push(p.clone());
                for (name, child) in live {
                    todo.push((*child, p.join(name)));
                }
            }
        }
        out
    }

    /// The directories whose entries changed since their last fsync, as they are now: each
    /// may also have been written back by itself before a crash (a filesystem that writes
    /// directory blocks independently, ext4 without a journal).
    pub fn dirty_dirs(&self) -> Vec<PathBuf> {
        self.live_dirs(&self.root.clone())
            .into_iter()
            .filter(|d| {
                let id = self.lookup(&self.rel(d)).expect("a live directory");
                matches!(&self.nodes[id], Node::Dir { live, durable } if live != durable)
            })
            .collect()
    }

    /// Writes the tree a crash now may leave at `dest` (which must not exist).
    pub fn durable(&self, dest: &Path) {
        std::fs::create_dir_all(dest).unwrap();
        self.write_tree(0, dest, true, &mut BTreeMap::new());
    }

    /// Writes the live tree at `dest`; the model's replay of what really happened.
    pub fn live(&self, dest: &Path) {
        std::fs::create_dir_all(dest).unwrap();
        self.write_tree(0, dest, false, &mut BTreeMap::new());
    }

    /// Writes directory `id` at `path`, as of its last fsync (`durable`) or as it is. A file
    /// in two directories (a rename whose destination became durable and whose source's
    /// removal did not) is one inode with two links, as on a disk after a crash (fsck counts
    /// the links): `written` holds where each file was written first.
    fn write_tree(
        &self,
        id: usize,
        path: &Path,
        durable: bool,
        written: &mut BTreeMap<usize, PathBuf>,
    ) {
        let Node::Dir {
            live,
            durable: synced,
        } = &self.nodes[id]
        else {
            unreachable!()
        };
        for (name, child) in if durable { synced } else { live } {
            let p = path.join(name);
            match &self.nodes[*child] {
                Node::Dir { .. } => {
                    std::fs::create_dir(&p).unwrap();
                    self.write_tree(*child, &p, durable, written);
                }
                Node::File {
                    live,
                    durable: data,
                } => {
                    if let Some(first) = written.get(child) {
                        std::fs::hard_link(first, &p).unwrap();
                        continue;
                    }
                    let bytes = if durable {
                        data.as_deref().unwrap_or_default()
                    } else {
                        live.as_slice()
                    };
                    std::fs::write(&p, bytes).unwrap();
                    written.insert(*child, p);
                }
            }
        }
    }
}

/// Copies a directory tree (regular files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else if ft.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A scratch directory for crash images: in `/dev/shm` when that is a writable tmpfs with
/// 512 MiB free, else in the system's temporary directory. The images are made and checked through the model of
/// the seam ([`Model`]), so the filesystem under them changes nothing a test checks (a claim's
/// rule, by rename or by link, is forced by each test); on tmpfs making hundreds of thousands
/// of files costs microseconds each, where a disk can take hundreds (ext4 without a journal
/// skips the inodes it freed in the last minutes).
pub fn image_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    // tmpfs, with room for a test's images (a container's is often 64 MiB).
    let roomy = rustix::fs::statfs(shm).is_ok_and(|st| {
        st.f_type == 0x0102_1994 && st.f_bavail.saturating_mul(st.f_bsize as _) >= 512 << 20
    });
    if roomy
        && let Ok(d) = tempfile::Builder::new()
            .prefix("sigbox-crash")
            .tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}
