//! `parley init DIR`: writes a scaffold (see [`crate::scaffold`]) into a new or empty folder and
//! says what to run next. A folder with files in it is refused unless `--force` is given.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use crate::cli::InitArgs;
use crate::error::usage;
use crate::scaffold::{self, Tools};

pub fn init(args: InitArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    if !args.force && has_entries(dir)? {
        return Err(usage(format!(
            "{} is not empty: choose a new folder, or pass --force to write the scaffold's files over the ones \
             there (other files are left alone)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("reading {}", dir.display()))?;
    let files = scaffold::files(args.tools, &dir).map_err(usage)?;
    for file in &files {
        let path = dir.join(file.name);
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
        if file.executable {
            executable(&path)?;
        }
    }

    let mut out = std::io::stdout().lock();
    writeln!(out, "A custom environment in {} ({}):", dir.display(), args.tools.about())?;
    for file in &files {
        writeln!(out, "  {}", file.name)?;
    }
    writeln!(out, "Run it with the built-in stub as the model:")?;
    if args.tools == Tools::Gym {
        writeln!(out, "  python3 {} --port 8765 &", dir.join("resources_server.py").display())?;
    }
    writeln!(out, "  parley run --settings {}", dir.join("parley.toml").display())?;
    writeln!(out, "{} says what to do next.", dir.join("README.md").display())?;
    Ok(())
}

/// Whether `dir` exists with something in it (a file where the folder should be counts).
fn has_entries(dir: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(usage(format!("{} is a file: choose a folder that does not exist yet, or an empty one", dir.display())))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

#[cfg(unix)]
fn executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(not(unix))]
fn executable(_: &Path) -> anyhow::Result<()> {
    Ok(())
}
