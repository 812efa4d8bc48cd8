//! What every target checks beyond "no panic": a data set that parses is fully readable, with
//! exactly n × dim values behind it.
use voisin::Dataset;

pub fn touch(parsed: Result<Dataset, voisin_io::IoError>) {
    match parsed {
        Ok(Dataset::Vectors(v)) => {
            let all = v.rows_f32(0, v.len());
            assert_eq!(all.len(), v.len() * v.dim());
        }
        Ok(Dataset::Strings(s)) => {
            let total: usize = s.iter().map(|t| t.len()).sum();
            assert!(total >= s.max_len());
        }
        Err(e) => {
            let text = e.to_string();
            assert!(!text.contains('\n'), "multi-line error: {text}");
        }
    }
}
