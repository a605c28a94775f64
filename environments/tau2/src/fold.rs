//! tau2's `fold_for_match`: strip, drop diacritics (NFD minus combining marks), case-fold. Used
//! by the lookups tau2 made tolerant of spoken ids and names. Without a Unicode database this
//! folds the Latin letters with diacritics that tau2's data and its voice personas use; other
//! characters are only lowercased. It never folds beyond case and accents.

pub fn fold_for_match(text: &str) -> String {
    text.trim().chars().map(strip_accent).flat_map(char::to_lowercase).collect()
}

fn strip_accent(c: char) -> char {
    const FROM: &str = "ÀÁÂÃÄÅàáâãäåÇçÈÉÊËèéêëÌÍÎÏìíîïÑñÒÓÔÕÖòóôõöÙÚÛÜùúûüÝýÿĀāĂăĄąĆćČčĎďĒēĘęĚěĞğĪīİıŁłŃńŇňŌōŐőŘřŚśŞşŠšŢţŤťŪūŮůŰűŹźŻżŽž";
    const TO: &str = "AAAAAAaaaaaaCcEEEEeeeeIIIIiiiiNnOOOOOoooooUUUUuuuuYyyAaAaAaCcCcDdEeEeEeGgIiIiLlNnNnOoOoRrSsSsSsTtTtUuUuUuZzZzZz";
    match FROM.chars().position(|f| f == c) {
        Some(i) => TO.chars().nth(i).unwrap_or(c),
        None => c,
    }
}

#[cfg(test)]
mod tests {
    use super::fold_for_match;

    #[test]
    fn folds_case_and_accents() {
        assert_eq!(fold_for_match("  Álvaro Fernández "), "alvaro fernandez");
        assert_eq!(fold_for_match("Sara_Doe_496"), "sara_doe_496");
    }
}
