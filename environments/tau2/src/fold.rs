//! tau2's `fold_for_match`: strip, drop diacritics (NFD minus combining marks), case-fold. Used
//! by the lookups tau2 made tolerant of spoken ids and names. Without a Unicode database this
//! folds the Latin letters with diacritics that tau2's data and its voice personas use; other
//! characters are only lowercased. It never folds beyond case and accents.
//!
//! A lookup folds what it was asked for once, then compares each stored key or name with
//! [`folds_to`], which folds as it compares and stops at the first character that differs: a
//! miss in the airline's reservations used to fold and allocate every key in full, and was over
//! half of a stubbed tau2 run's CPU.

pub fn fold_for_match(text: &str) -> String {
    folded(text).collect()
}

/// Whether `text` folds to `folded`, a text [`fold_for_match`] gave: the same as
/// `fold_for_match(text) == folded`, without building the folded text.
pub fn folds_to(text: &str, folded_text: &str) -> bool {
    folded(text).eq(folded_text.chars())
}

fn folded(text: &str) -> impl Iterator<Item = char> + '_ {
    text.trim().chars().map(strip_accent).flat_map(char::to_lowercase)
}

fn strip_accent(c: char) -> char {
    const FROM: &str = "ÀÁÂÃÄÅàáâãäåÇçÈÉÊËèéêëÌÍÎÏìíîïÑñÒÓÔÕÖòóôõöÙÚÛÜùúûüÝýÿĀāĂăĄąĆćČčĎďĒēĘęĚěĞğĪīİıŁłŃńŇňŌōŐőŘřŚśŞşŠšŢţŤťŪūŮůŰűŹźŻżŽž";
    const TO: &str = "AAAAAAaaaaaaCcEEEEeeeeIIIIiiiiNnOOOOOoooooUUUUuuuuYyyAaAaAaCcCcDdEeEeEeGgIiIiLlNnNnOoOoRrSsSsSsTtTtUuUuUuZzZzZz";
    // The table holds no ASCII letter; most of what is looked up is ASCII.
    if c.is_ascii() {
        return c;
    }
    match FROM.chars().position(|f| f == c) {
        Some(i) => TO.chars().nth(i).unwrap_or(c),
        None => c,
    }
}

#[cfg(test)]
mod tests {
    use super::{fold_for_match, folds_to};

    #[test]
    fn folds_case_and_accents() {
        assert_eq!(fold_for_match("  Álvaro Fernández "), "alvaro fernandez");
        assert_eq!(fold_for_match("Sara_Doe_496"), "sara_doe_496");
    }

    #[test]
    fn compares_as_the_folded_texts_do() {
        let texts = "| |a|A|ab|Álvaro Fernández| alvaro fernandez|ALVARO FERNANDEZ |alvaro|alvaro fernandezz|\
                     İstanbul|i̇stanbul|ŁÓDŹ|lodz|HAT001|hat001|hat00|Straße|STRASSE|Ωmega|ωmega|\u{2003}zoë\u{2003}|zoe";
        for a in texts.split('|') {
            for b in texts.split('|') {
                let folded = fold_for_match(b);
                assert_eq!(folds_to(a, &folded), fold_for_match(a) == folded, "{a:?} against {b:?}");
            }
        }
        assert!(folds_to(" Álvaro FERNÁNDEZ", "alvaro fernandez"));
        assert!(!folds_to("Álvaro", "alvar"));
        assert!(!folds_to("Álvar", "alvaro"));
    }
}
