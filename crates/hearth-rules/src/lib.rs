//! PLACEHOLDER of the rules engine's API (work in progress on branch rules-wip): it parses
//! nothing and denies everything. The real parser and evaluator replace it.
pub mod ast;
pub mod lexer;
pub mod parser;

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Timestamp};
pub struct Ruleset {
    pub allow: bool,
    pub file: parser::File,
}
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct RulesError {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}
impl RulesError {
    /// An error in `file` at `line`, `column`.
    pub fn at(file: &str, line: u32, column: u32, message: impl Into<String>) -> RulesError {
        RulesError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}
impl Ruleset {
    pub fn parse(file: &str, source: &str) -> Result<Ruleset, RulesError> {
        let parsed = parser::parse_file(file, source)?;
        Ok(Ruleset {
            allow: false,
            file: parsed,
        })
    }
    pub fn evaluate(&self, _req: &Request, _reader: &dyn Reader, _limit: usize) -> Decision {
        Decision {
            allowed: self.allow,
            explanation: "the rules engine is not built yet: everything is denied".into(),
            rule_line: None,
        }
    }
    pub fn check_list(
        &self,
        _db: &str,
        _q: &Query,
        _auth: Option<&Auth>,
        _t: Timestamp,
        _r: &dyn Reader,
    ) -> Decision {
        Decision {
            allowed: self.allow,
            explanation: "the rules engine is not built yet: everything is denied".into(),
            rule_line: None,
        }
    }
    pub fn uses_document_reads(&self) -> bool {
        false
    }
}
pub enum Method {
    Get,
    List,
    Create,
    Update,
    Delete,
}
pub struct Auth {
    pub uid: String,
    pub token: Map,
}
pub struct Request<'a> {
    pub database: &'a str,
    pub method: Method,
    pub path: &'a DocumentName,
    pub auth: Option<&'a Auth>,
    pub time: Timestamp,
    pub resource: Option<&'a Document>,
    pub new_resource: Option<&'a Document>,
}
pub trait Reader {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String>;
    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String>;
}
pub struct Decision {
    pub allowed: bool,
    pub explanation: String,
    pub rule_line: Option<u32>,
}
