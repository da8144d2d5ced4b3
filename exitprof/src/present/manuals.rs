//! exitprof's manual pages and shell completions, made from its command-line definition: a page
//! per command (`exitprof.1`, `exitprof-plan.1`, ...) by clap_mangen, completions for bash, zsh
//! and fish by clap_complete. `cargo xtask dist` puts them where Debian keeps them in both
//! packages (`exitprof __manuals DIR`).

use std::{fs, path::Path};

use anyhow::Context as _;
use clap::Command;
use clap_complete::Shell;

/// Writes the pages into `dir/man` and the completions into `dir/completions` (`exitprof.bash`,
/// `_exitprof`, `exitprof.fish`).
pub fn write(cli: &Command, dir: &Path) -> anyhow::Result<()> {
    let (man, completions) = (dir.join("man"), dir.join("completions"));
    for dir in [&man, &completions] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // The internal commands (`__workload`, ...) get neither a page nor a completion.
    let cli = without_hidden(cli);
    clap_mangen::generate_to(cli.clone(), &man)
        .with_context(|| format!("writing the manual pages into {}", man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cli.clone(), "exitprof", &completions)
            .with_context(|| format!("writing the {shell} completions"))?;
    }
    Ok(())
}

/// `cli` with only its visible subcommands: clap_complete offers hidden ones too.
fn without_hidden(cli: &Command) -> Command {
    let mut visible = Command::new(cli.get_name().to_owned())
        .args(cli.get_arguments().cloned())
        .subcommands(cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = cli.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(version) = cli.get_version() {
        visible = visible.version(version.to_owned());
    }
    visible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_command_gets_a_page_and_every_shell_its_completions() {
        let cli = Command::new("exitprof")
            .version("1.0")
            .about("Where does the time go when tasks exit?")
            .arg(clap::Arg::new("threads").long("threads"))
            .subcommand(Command::new("plan").about("Prints the probe plan."))
            .subcommand(Command::new("__workload").hide(true));
        let dir = tempfile::tempdir().unwrap();
        write(&cli, dir.path()).unwrap();
        let names = |sub: &str| {
            let mut names: Vec<String> = fs::read_dir(dir.path().join(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names("man"), ["exitprof-plan.1", "exitprof.1"]);
        assert_eq!(names("completions"), ["_exitprof", "exitprof.bash", "exitprof.fish"]);
        let page = fs::read_to_string(dir.path().join("man/exitprof.1")).unwrap();
        assert!(page.contains("exitprof\\-plan(1)") && page.contains("\\-\\-threads"), "{page}");
        let bash = fs::read_to_string(dir.path().join("completions/exitprof.bash")).unwrap();
        assert!(bash.contains("plan") && !bash.contains("__workload"), "{bash}");
    }
}
