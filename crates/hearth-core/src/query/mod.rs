//! Queries: the model, validation, normalization, the matcher, planning and execution.

pub mod execute;
pub mod matcher;
pub mod model;
pub mod normalize;
pub mod plan;
mod ranked;
pub mod validate;
pub mod view;
