//! Reads the `certrenewd check` table back: group headings (the watched directory, or a
//! kubeconfig directory), rows under them (cells two spaces apart), notes below rows.

/// One row of the table.
#[derive(Debug, Clone)]
pub struct TableRow {
    /// The file it names: the group joined with the name (without ` (user ...)`,
    /// ` (also ...)`); for a CA row, its short name joined to the group.
    pub path: String,
    /// The cells, the first being the name as shown.
    pub cells: Vec<String>,
    /// Whether it is a row of the CA table.
    pub ca: bool,
    /// The notes below it (reasons), joined with spaces.
    pub note: String,
}

impl TableRow {
    /// The STATUS cell.
    pub fn status(&self) -> &str {
        self.cells.last().map_or("", String::as_str)
    }

    /// Whether this CA row names `abs` (`/p/etcd/ca.crt` as `etcd/ca`, `ca-bundle#2`, or
    /// the whole path).
    pub fn names_ca(&self, abs: &str) -> bool {
        let name = self.cells[0].split(" (also ").next().unwrap_or("");
        let name = match name.rsplit_once('#') {
            Some((n, i)) if i.chars().all(|c| c.is_ascii_digit()) => n,
            _ => name,
        };
        let stem = std::path::Path::new(abs).with_extension("");
        let stem = stem.to_str().unwrap_or(abs);
        name == abs || stem.ends_with(&format!("/{name}"))
    }
}

/// The rows of both tables of a `check` output.
pub fn rows(table: &str) -> Vec<TableRow> {
    let mut out: Vec<TableRow> = Vec::new();
    let (mut group, mut ca) = (String::new(), false);
    for line in table.lines() {
        if line.starts_with("CERTIFICATE AUTHORITY ") {
            ca = true;
        } else if line.starts_with("CERTIFICATE ") {
            ca = false;
        } else if line.starts_with('/') && !line.contains(": ") {
            group = line.trim_end_matches(" (kubeconfigs)").to_string();
        } else if let Some(rest) = line.strip_prefix("      ")
            && !group.is_empty()
        {
            if let Some(last) = out.last_mut() {
                if !last.note.is_empty() {
                    last.note.push(' ');
                }
                last.note.push_str(rest.trim());
            }
        } else if let Some(rest) = line.strip_prefix("  ")
            && !rest.starts_with(' ')
            && !group.is_empty()
        {
            let cells: Vec<String> = rest
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            let name = cells[0].split(" (").next().unwrap_or("").to_string();
            out.push(TableRow {
                path: format!("{group}/{name}"),
                cells,
                ca,
                note: String::new(),
            });
        } else if line.is_empty() {
            group.clear();
        }
    }
    out
}

/// The longest line, in characters.
pub fn max_width(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}
