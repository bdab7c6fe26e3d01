//! Statements whose SQL grows with the rows they write: several rows'
//! own values in one `UPDATE`, each chosen by the row's key with `CASE key
//! WHEN … THEN … END`, so that the writes that fall due together cost one
//! round trip and one commit instead of one each. Each statement is
//! atomic: every row it names is written, or none.
//!
//! Their SQL has as many shapes as there are batch sizes, so they are not
//! kept prepared (diesel would otherwise cache one statement per size).

use diesel::QueryResult;
use diesel::backend::Backend;
use diesel::query_builder::AstPass;
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Integer, Nullable, Text};

/// What the batched statements bind, on a concrete backend.
pub(crate) trait Binds:
    Backend + HasSqlType<BigInt> + HasSqlType<Text> + HasSqlType<Nullable<Integer>>
{
}

impl<DB> Binds for DB where
    DB: Backend + HasSqlType<BigInt> + HasSqlType<Text> + HasSqlType<Nullable<Integer>>
{
}

/// Writes `column = CASE key WHEN k1 THEN v1 WHEN k2 THEN v2 … END`: `key`
/// is pushed for each row by `push_key`, its value by `push_value`.
pub(crate) fn case_by_key<'b, DB, R>(
    out: &mut AstPass<'_, 'b, DB>,
    column: &str,
    key: &str,
    rows: &'b [R],
    push_key: impl Fn(&mut AstPass<'_, 'b, DB>, &'b R) -> QueryResult<()>,
    push_value: impl Fn(&mut AstPass<'_, 'b, DB>, &'b R) -> QueryResult<()>,
) -> QueryResult<()>
where
    DB: Backend,
{
    out.push_identifier(column)?;
    out.push_sql(" = CASE ");
    out.push_identifier(key)?;
    for row in rows {
        out.push_sql(" WHEN ");
        push_key(out, row)?;
        out.push_sql(" THEN ");
        push_value(out, row)?;
    }
    out.push_sql(" END");
    Ok(())
}

/// Writes `key IN (k1, k2, …)`.
pub(crate) fn key_in<'b, DB, R>(
    out: &mut AstPass<'_, 'b, DB>,
    key: &str,
    rows: &'b [R],
    push_key: impl Fn(&mut AstPass<'_, 'b, DB>, &'b R) -> QueryResult<()>,
) -> QueryResult<()>
where
    DB: Backend,
{
    out.push_identifier(key)?;
    out.push_sql(" IN (");
    for (n, row) in rows.iter().enumerate() {
        if n > 0 {
            out.push_sql(", ");
        }
        push_key(out, row)?;
    }
    out.push_sql(")");
    Ok(())
}

/// Binds `value` as a BIGINT.
pub(crate) fn big_int<'b, DB>(out: &mut AstPass<'_, 'b, DB>, value: &'b i64) -> QueryResult<()>
where
    DB: Binds,
    i64: ToSql<BigInt, DB>,
{
    out.push_bind_param::<BigInt, i64>(value)
}

/// Binds `value` as TEXT.
pub(crate) fn text<'b, DB>(out: &mut AstPass<'_, 'b, DB>, value: &'b String) -> QueryResult<()>
where
    DB: Binds,
    String: ToSql<Text, DB>,
{
    out.push_bind_param::<Text, String>(value)
}

/// Implements `QueryFragment` for every backend built in, and for the
/// backend of the connection that picks one, from the type's generic
/// `walk` (whose bounds every backend meets), and marks the statement
/// run-once (`QueryId` without a static id, never cached as prepared).
macro_rules! batch_statement {
    ($node:ident) => {
        impl diesel::query_builder::QueryId for $node<'_> {
            type QueryId = ();
            const HAS_STATIC_QUERY_ID: bool = false;
        }

        impl<Conn> diesel::RunQueryDsl<Conn> for $node<'_> {}

        impl diesel::query_builder::QueryFragment<$crate::db::MultiBackend> for $node<'_> {
            fn walk_ast<'b>(
                &'b self,
                pass: diesel::query_builder::AstPass<'_, 'b, $crate::db::MultiBackend>,
            ) -> diesel::QueryResult<()> {
                $crate::db::MultiBackend::walk_variant_ast(self, pass)
            }
        }

        #[cfg(feature = "sqlite")]
        impl diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite> for $node<'_> {
            fn walk_ast<'b>(
                &'b self,
                pass: diesel::query_builder::AstPass<'_, 'b, diesel::sqlite::Sqlite>,
            ) -> diesel::QueryResult<()> {
                self.walk(pass)
            }
        }

        #[cfg(feature = "mysql")]
        impl diesel::query_builder::QueryFragment<diesel::mysql::Mysql> for $node<'_> {
            fn walk_ast<'b>(
                &'b self,
                pass: diesel::query_builder::AstPass<'_, 'b, diesel::mysql::Mysql>,
            ) -> diesel::QueryResult<()> {
                self.walk(pass)
            }
        }

        #[cfg(feature = "postgres")]
        impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for $node<'_> {
            fn walk_ast<'b>(
                &'b self,
                pass: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
            ) -> diesel::QueryResult<()> {
                self.walk(pass)
            }
        }
    };
}
pub(crate) use batch_statement;
