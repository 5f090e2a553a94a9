//! The manifest every output directory carries (`manifest.json`): each file metafork wrote
//! there with its SHA-256, and where the output came from (the source program's copy and its
//! display name, the wisdom file's copy). `write_dir` reads the previous one to know which
//! entries are metafork's (and unchanged) and may be dropped; `verify` reads it to find the
//! source. A manifest read from disk is untrusted: every name is checked to be a plain file
//! name inside the directory and every hash to be well formed, and a file is read only through
//! [`read_entry`], which refuses anything but a regular file (no symbolic link is followed).

use super::is_plain_file_name;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The manifest's file name in an output directory.
pub const MANIFEST: &str = "manifest.json";
/// The largest manifest read, and the largest file `read_entry` reads (bytes).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
pub const MAX_ENTRY_BYTES: u64 = 256 << 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The metafork version that wrote the directory.
    pub metafork: String,
    /// Which command's output the directory holds; absent in manifests written before it was
    /// recorded (see [`Manifest::kind`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
    /// The program the output was generated from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRef>,
    /// The tuning wisdom the dispatch code was generated with (its copy in the directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wisdom: Option<String>,
    /// The architectures `gen --ptxas` compiled the leaves for (their counts are in tree.yaml;
    /// `verify` compiles again to re-derive them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ptxas: Vec<String>,
    /// Every file metafork wrote (the manifest aside), with its SHA-256 in hex; a name listed
    /// twice is refused, as a field given twice is.
    #[serde(deserialize_with = "constraints::input::unique_keys")]
    pub files: BTreeMap<String, String>,
}

/// Which command wrote an output directory. One command's output never silently replaces
/// another's: `write_dir` refuses it without `--force`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputKind {
    /// `metafork gen`: kernels, dispatch, tree.
    #[default]
    Gen,
    /// `metafork tune --emit-harness`: the timing harness.
    Harness,
}

impl OutputKind {
    /// The command, as a user types it.
    pub fn command(self) -> &'static str {
        match self {
            OutputKind::Gen => "metafork gen",
            OutputKind::Harness => "metafork tune --emit-harness",
        }
    }
}

/// What a directory was generated from, besides its files.
#[derive(Clone, Debug, Default)]
pub struct Provenance {
    pub output: OutputKind,
    pub source: Option<SourceRef>,
    pub wisdom: Option<String>,
    pub ptxas: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceRef {
    /// The name the program was given by (shown in generated comments; never opened).
    pub name: String,
    /// Its copy in the directory.
    pub file: String,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

impl Manifest {
    /// The manifest of `files` (name to contents).
    pub fn of(files: &BTreeMap<String, Vec<u8>>, from: Provenance) -> Manifest {
        Manifest {
            metafork: env!("CARGO_PKG_VERSION").to_string(),
            output: Some(from.output),
            source: from.source,
            wisdom: from.wisdom,
            ptxas: from.ptxas,
            files: files.iter().map(|(n, b)| (n.clone(), sha256_hex(b))).collect(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serialises") + "\n"
    }

    /// Parse and check a manifest's text.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_str(text).map_err(|e| format!("not a metafork manifest: {e}"))?;
        for (name, hash) in &m.files {
            if !is_plain_file_name(name) || name == MANIFEST {
                return Err(format!("it lists `{}`, which is not a plain file name inside the directory", name.escape_debug()));
            }
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(format!("the hash of `{}` is not a SHA-256 in hex", name.escape_debug()));
            }
        }
        // `gen` writes each architecture once, sorted: a repeat would compile the leaves again.
        if let Some(arch) = m.ptxas.iter().find(|a| !crate::compiled::ARCHS.contains(&a.as_str())) {
            return Err(format!("it names `{}` under `ptxas`, which is not an architecture metafork compiles for", arch.escape_debug()));
        }
        if let Some(w) = m.ptxas.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!("its `ptxas` list is not as `metafork gen` writes it (`{}` after `{}`: each architecture once, sorted)", w[1], w[0]));
        }
        let listed = |f: &str, what: &str| if m.files.contains_key(f) { Ok(()) } else { Err(format!("its {what} `{}` is not among its files", f.escape_debug())) };
        if let Some(s) = &m.source {
            listed(&s.file, "source copy")?;
        }
        if let Some(w) = &m.wisdom {
            listed(w, "wisdom copy")?;
        }
        Ok(m)
    }

    /// The manifest of directory `dir`: `Ok(None)` when it has none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, String> {
        match read_entry(dir, MANIFEST, MAX_MANIFEST_BYTES) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| format!("`{}` is not UTF-8", dir.join(MANIFEST).display()))?;
                Manifest::parse(&text).map(Some).map_err(|e| format!("`{}`: {e}", dir.join(MANIFEST).display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read `{}`: {e}", dir.join(MANIFEST).display())),
        }
    }

    /// Which command wrote the directory. A manifest from before the field was recorded is
    /// `gen`'s when it names a source program (only `gen` copies one), else the harness's.
    pub fn kind(&self) -> OutputKind {
        self.output.unwrap_or(if self.source.is_some() { OutputKind::Gen } else { OutputKind::Harness })
    }

    /// Whether `dir/name` holds exactly what the manifest recorded.
    pub fn unchanged(&self, dir: &Path, name: &str) -> bool {
        self.files.get(name).is_some_and(|h| read_entry(dir, name, MAX_ENTRY_BYTES).is_ok_and(|b| sha256_hex(&b) == *h))
    }
}

/// Read the regular file `dir/name` (`name` one plain component), never following a symbolic
/// link and never blocking on a FIFO; at most `limit` bytes.
pub fn read_entry(dir: &Path, name: &str, limit: u64) -> std::io::Result<Vec<u8>> {
    if !is_plain_file_name(name) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a plain file name"));
    }
    constraints::input::read_regular(&dir.join(name), limit, constraints::input::Links::Refuse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_names_outside_the_directory() {
        let mut files = BTreeMap::new();
        files.insert("tree.yaml".to_string(), b"x".to_vec());
        files.insert("source.mf".to_string(), b"y".to_vec());
        let m = Manifest::of(&files, Provenance { source: Some(SourceRef { name: "../a b\n.mf".into(), file: "source.mf".into() }), ..Default::default() });
        assert_eq!(Manifest::parse(&m.to_json()).unwrap(), m);
        for bad in ["../x", "/etc/passwd", "a/b", ".hidden", "", MANIFEST] {
            let mut m2 = m.clone();
            m2.files.insert(bad.to_string(), sha256_hex(b""));
            assert!(Manifest::parse(&m2.to_json()).is_err(), "{bad}");
        }
        let mut m3 = m.clone();
        m3.source = Some(SourceRef { name: "a".into(), file: "elsewhere.mf".into() });
        assert!(Manifest::parse(&m3.to_json()).is_err());
        let mut m4 = m.clone();
        m4.files.insert("x.cu".into(), "not a hash".into());
        assert!(Manifest::parse(&m4.to_json()).is_err());
        assert!(Manifest::parse("{\"metafork\": \"0\", \"files\": {}, \"extra\": 1}").is_err());
        // The command that wrote it: recorded, else inferred from the source copy.
        assert_eq!(m.kind(), OutputKind::Gen);
        assert!(m.to_json().contains("\"output\": \"gen\""));
        let harness = Manifest::of(&files, Provenance { output: OutputKind::Harness, ..Default::default() });
        assert_eq!(Manifest::parse(&harness.to_json()).unwrap().kind(), OutputKind::Harness);
        assert_eq!(Manifest::parse("{\"metafork\": \"0\", \"files\": {}}").unwrap().kind(), OutputKind::Harness);
        assert!(Manifest::parse("{\"metafork\": \"0\", \"output\": \"tune\", \"files\": {}}").is_err());
        // The architectures: known ones, each once, sorted (a repeat used to compile again).
        let with = |archs: &[&str]| Manifest::parse(&Manifest { ptxas: archs.iter().map(|a| a.to_string()).collect(), ..m.clone() }.to_json());
        assert!(with(&["sm_75", "sm_90"]).is_ok());
        assert!(with(&["sm_90", "sm_90"]).unwrap_err().contains("`sm_90` after `sm_90`"));
        assert!(with(&["sm_90", "sm_75"]).is_err());
        assert!(with(&["sm_99"]).unwrap_err().contains("`sm_99`"));
    }

    #[test]
    fn read_entry_follows_no_link_and_reads_no_fifo() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), b"ok").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let c = std::ffi::CString::new(dir.path().join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read_entry(dir.path(), "real", 10).unwrap(), b"ok");
        assert!(read_entry(dir.path(), "real", 1).is_err());
        assert!(read_entry(dir.path(), "link", 1 << 20).is_err());
        assert!(read_entry(dir.path(), "fifo", 1 << 20).is_err());
        assert!(read_entry(dir.path(), "../real", 1 << 20).is_err());
    }
}
