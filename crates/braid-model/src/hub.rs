//! Models named on a model hub instead of a path: `--hf-repo OWNER/NAME --hf-file FILE.gguf
//! [--hf-revision REV]`.
//!
//! The file is looked up in the local hub cache first, in the layout the Hugging Face
//! clients share (so a model the Python client downloaded is found, and the reverse):
//!
//! ```text
//! $HF_HUB_CACHE (default $HF_HOME/hub, default ~/.cache/huggingface/hub)
//! └── models--OWNER--NAME
//!     ├── refs/main                  the commit a branch or tag points to
//!     ├── snapshots/<commit>/FILE    a symlink into blobs/ (or the file itself)
//!     └── blobs/<sha256>
//! ```
//!
//! A revision may be a branch, a tag or a full commit hash. Only when the file is not cached
//! does braid download it through the `hf-hub` crate's synchronous client (from
//! `$HF_ENDPOINT`, default huggingface.co, with `$HF_TOKEN` or the cached token), which
//! fills the same cache. With `HF_HUB_OFFLINE=1` nothing is downloaded, and a missing file is
//! an error that says exactly which part of the cache is missing.

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};
use std::path::{Path, PathBuf};

/// A model file on a hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubModel {
    /// `OWNER/NAME`.
    pub repo: String,
    /// File in the repository, e.g. `SmolLM2-135M-Instruct.Q4_1.gguf`.
    pub file: String,
    /// Branch, tag or commit hash.
    pub revision: String,
}

impl std::fmt::Display for HubModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} (revision {})",
            self.file, self.repo, self.revision
        )
    }
}

/// Where the cache is and whether the network may be used; from the environment by default.
#[derive(Clone, Debug)]
pub struct HubEnv {
    pub cache_dir: PathBuf,
    pub offline: bool,
    /// `HF_ENDPOINT`: the hub's base URL (a mirror, or a test server).
    pub endpoint: Option<String>,
    /// `HF_TOKEN`, for private or gated repositories.
    pub token: Option<String>,
}

impl HubEnv {
    /// `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE`
    /// (1/true/yes/on); `HF_ENDPOINT`; `HF_TOKEN`.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let cache_dir = match var("HF_HUB_CACHE") {
            Some(dir) => PathBuf::from(dir),
            None => Cache::from_env().path().clone(),
        };
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        Self {
            cache_dir,
            offline,
            endpoint: var("HF_ENDPOINT"),
            token: var("HF_TOKEN"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("--hf-repo {0:?} is not a repository id: give it as OWNER/NAME, e.g. HuggingFaceTB/SmolLM2-135M-Instruct-GGUF")]
    BadRepo(String),
    #[error("--hf-file {0:?} is not a file name in a repository (e.g. model.Q4_1.gguf)")]
    BadFile(String),
    #[error(
        "{target} is not in the hub cache: {missing}. HF_HUB_OFFLINE is set, so nothing is \
         downloaded: fetch it once with network access (or unset HF_HUB_OFFLINE), point \
         HF_HUB_CACHE/HF_HOME at a cache that has it, or pass --model PATH"
    )]
    NotCached {
        /// "FILE of OWNER/NAME (revision REV)".
        target: String,
        missing: String,
    },
    #[error(
        "cannot download {target} from {endpoint}: {reason}. Check the repository, file and \
         revision names (and HF_TOKEN for a private repository), or set HF_HUB_OFFLINE=1 to \
         use only the cache at {cache}"
    )]
    Download {
        target: String,
        endpoint: String,
        cache: PathBuf,
        reason: String,
    },
}

/// The local path of `model`'s file, from the cache or (unless offline) downloaded into it.
pub fn resolve(model: &HubModel) -> Result<PathBuf, HubError> {
    resolve_with(model, &HubEnv::from_env())
}

/// [`resolve`] with an explicit environment (tests).
pub fn resolve_with(model: &HubModel, env: &HubEnv) -> Result<PathBuf, HubError> {
    check_names(model)?;
    let repo = Repo::with_revision(model.repo.clone(), RepoType::Model, model.revision.clone());
    let cache = Cache::new(env.cache_dir.clone());
    if let Some(path) = cache.repo(repo.clone()).get(&model.file) {
        return Ok(path);
    }
    let repo_dir = env.cache_dir.join(repo.folder_name());
    if is_commit_hash(&model.revision) {
        let path = repo_dir
            .join("snapshots")
            .join(&model.revision)
            .join(&model.file);
        if path.is_file() {
            return Ok(path);
        }
    }
    if env.offline {
        return Err(HubError::NotCached {
            target: model.to_string(),
            missing: what_is_missing(&repo_dir, model),
        });
    }
    let mut builder = ApiBuilder::from_cache(cache).with_progress(false);
    if env.token.is_some() {
        builder = builder.with_token(env.token.clone());
    }
    let endpoint = env
        .endpoint
        .clone()
        .unwrap_or_else(|| "https://huggingface.co".into());
    builder = builder.with_endpoint(endpoint.clone());
    let download_error = |reason: String| HubError::Download {
        target: model.to_string(),
        endpoint: endpoint.clone(),
        cache: env.cache_dir.clone(),
        reason,
    };
    let api = builder.build().map_err(|e| download_error(e.to_string()))?;
    tracing::info!(
        repo = %model.repo,
        file = %model.file,
        revision = %model.revision,
        cache = %env.cache_dir.display(),
        "not in the hub cache; downloading"
    );
    api.repo(repo)
        .get(&model.file)
        .map_err(|e| download_error(e.to_string()))
}

fn check_names(model: &HubModel) -> Result<(), HubError> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match model.repo.split_once('/') {
        Some((owner, name)) if part_ok(owner) && part_ok(name) => {}
        _ => return Err(HubError::BadRepo(model.repo.clone())),
    }
    let file = Path::new(&model.file);
    let file_ok = !model.file.is_empty()
        && file.is_relative()
        && file
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !file_ok {
        return Err(HubError::BadFile(model.file.clone()));
    }
    Ok(())
}

fn is_commit_hash(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Which part of the cache layout is absent, for the offline error.
fn what_is_missing(repo_dir: &Path, model: &HubModel) -> String {
    if !repo_dir.is_dir() {
        return format!(
            "{} does not exist (repository never downloaded)",
            repo_dir.display()
        );
    }
    let ref_path = repo_dir.join("refs").join(&model.revision);
    let commit = match std::fs::read_to_string(&ref_path) {
        Ok(c) => c.trim().to_string(),
        Err(_) if is_commit_hash(&model.revision) => model.revision.clone(),
        Err(_) => {
            return format!(
                "{} does not exist (revision {} never downloaded)",
                ref_path.display(),
                model.revision
            )
        }
    };
    let snapshot = repo_dir.join("snapshots").join(&commit);
    let mut present: Vec<String> = std::fs::read_dir(&snapshot)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    present.sort();
    let listing = if present.is_empty() {
        "it is empty".to_string()
    } else {
        format!("it holds {}", present.join(", "))
    };
    format!("{} has no {} ({listing})", snapshot.display(), model.file)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    fn model(repo: &str, file: &str, revision: &str) -> HubModel {
        HubModel {
            repo: repo.into(),
            file: file.into(),
            revision: revision.into(),
        }
    }

    fn offline(dir: &Path) -> HubEnv {
        HubEnv {
            cache_dir: dir.to_path_buf(),
            offline: true,
            endpoint: None,
            token: None,
        }
    }

    /// A cache as the hub clients lay it out: the file is a blob, the snapshot links to it.
    fn populate(cache: &Path, folder: &str, branch: &str, file: &str) -> PathBuf {
        let repo = cache.join(folder);
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(COMMIT)).unwrap();
        let blob = repo.join("blobs").join("b1a3");
        crate::tiny_gguf::write(&blob, 3).unwrap();
        std::fs::write(repo.join("refs").join(branch), COMMIT).unwrap();
        let link = repo.join("snapshots").join(COMMIT).join(file);
        std::os::unix::fs::symlink(Path::new("../../blobs/b1a3"), &link).unwrap();
        link
    }

    #[test]
    fn a_cached_file_is_found_and_loads_offline() {
        let dir = tempfile::tempdir().unwrap();
        let link = populate(dir.path(), "models--tiny--llama", "main", "tiny.gguf");
        let env = offline(dir.path());
        let path = resolve_with(&model("tiny/llama", "tiny.gguf", "main"), &env).unwrap();
        assert_eq!(path, link);
        let loaded = crate::LoadedModel::load(&path).unwrap();
        assert_eq!(loaded.config().num_layers, crate::tiny_gguf::LAYERS);
        // By commit hash too, though no ref names it.
        let by_commit = resolve_with(&model("tiny/llama", "tiny.gguf", COMMIT), &env).unwrap();
        assert_eq!(by_commit, link);
    }

    #[test]
    fn offline_misses_say_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path(), "models--tiny--llama", "main", "tiny.gguf");
        let env = offline(dir.path());
        let err = |m: HubModel| resolve_with(&m, &env).unwrap_err().to_string();
        let e = err(model("nobody/missing", "x.gguf", "main"));
        assert!(e.contains("models--nobody--missing does not exist"), "{e}");
        assert!(e.contains("HF_HUB_OFFLINE"), "{e}");
        let e = err(model("tiny/llama", "tiny.gguf", "v2"));
        assert!(e.contains("refs/v2 does not exist"), "{e}");
        let e = err(model("tiny/llama", "other.gguf", "main"));
        assert!(e.contains("has no other.gguf (it holds tiny.gguf)"), "{e}");
    }

    #[test]
    fn names_are_checked_before_any_lookup() {
        let env = offline(Path::new("/nonexistent"));
        for repo in ["noslash", "a/b/c", "/x", "a/", "../x", "a b/c"] {
            let e = resolve_with(&model(repo, "f.gguf", "main"), &env).unwrap_err();
            assert!(matches!(e, HubError::BadRepo(_)), "{repo}: {e}");
        }
        for file in ["", "/etc/passwd", "../x.gguf", "a/../../b"] {
            let e = resolve_with(&model("a/b", file, "main"), &env).unwrap_err();
            assert!(matches!(e, HubError::BadFile(_)), "{file}: {e}");
        }
    }

    /// Online, a file that is not cached is downloaded; an unreachable hub is a clear error
    /// naming the endpoint (a closed loopback port stands in for a hub that cannot be reached).
    #[test]
    fn an_unreachable_hub_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env = HubEnv {
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            offline: false,
            ..offline(dir.path())
        };
        let e = resolve_with(&model("nobody/missing", "x.gguf", "main"), &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot download x.gguf of nobody/missing"),
            "{e}"
        );
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
