//! `-- CMD ARGS`: finding the program before anything starts, and becoming it in the child.

use std::{
    ffi::{OsStr, OsString},
    io,
    os::unix::{ffi::OsStrExt as _, fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
};

/// Why CMD cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("command not found: {name:?} is not an executable file in any PATH directory")]
    NotFound { name: OsString },
    #[error("cannot run {path:?}: no such file")]
    NoSuchFile { path: PathBuf },
    #[error("cannot run {path:?}: not an executable file")]
    NotExecutable { path: PathBuf },
}

/// The file `name` runs, as execvp would find it: `name` itself when it holds a slash, else the
/// first executable file of that name in a PATH directory.
pub fn resolve(name: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, CommandError> {
    if name.as_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        return match path.metadata() {
            Err(_) => Err(CommandError::NoSuchFile { path }),
            Ok(_) if !is_executable_file(&path) => Err(CommandError::NotExecutable { path }),
            Ok(_) => Ok(path),
        };
    }
    // execvp's default search path when PATH is unset.
    let path_var = path_var.unwrap_or(OsStr::new("/bin:/usr/bin"));
    std::env::split_paths(path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| CommandError::NotFound { name: name.to_owned() })
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else { return false };
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return false;
    }
    // SAFETY: a NUL-terminated path string; access(2) only reads it.
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
}

/// Replaces this process with `program`, its command line `argv` (CMD first). Returns only on
/// failure.
pub fn exec(program: &Path, argv: &[OsString]) -> io::Error {
    let mut cmd = Command::new(program);
    if let Some((arg0, args)) = argv.split_first() {
        cmd.arg0(arg0).args(args);
    }
    cmd.exec()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn finds_commands_as_execvp_does() {
        let dir = std::env::temp_dir().join(format!("exitprof-resolve-{}", std::process::id()));
        let (bin, other) = (dir.join("bin"), dir.join("other"));
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("tool"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(other.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(bin.join("tool"), "not executable").unwrap();
        fs::write(bin.join("data"), "not executable").unwrap();
        let path_var = std::env::join_paths([&bin, &other]).unwrap();

        let found = resolve(OsStr::new("tool"), Some(&path_var));
        assert_eq!(found, Ok(other.join("tool")), "the non-executable one is skipped");
        assert_eq!(
            resolve(OsStr::new("nosuch"), Some(&path_var)),
            Err(CommandError::NotFound { name: "nosuch".into() })
        );
        let data = bin.join("data");
        assert_eq!(
            resolve(data.as_os_str(), Some(&path_var)),
            Err(CommandError::NotExecutable { path: data })
        );
        let missing = bin.join("missing");
        assert_eq!(
            resolve(missing.as_os_str(), None),
            Err(CommandError::NoSuchFile { path: missing })
        );
        assert_eq!(
            resolve(bin.as_os_str(), None),
            Err(CommandError::NotExecutable { path: bin.clone() }),
            "a directory is not a command"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
