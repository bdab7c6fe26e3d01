//! `UPDATE` statements that stay prepared on their connection.
//!
//! diesel prepares each of its `UpdateStatement`s afresh at every execution
//! (its SQL may vary between executions of one Rust type). On MariaDB/MySQL
//! that is a round trip of its own before the execution; on SQLite a parse.
//! The statements every run sends (claim, extend, release, a run's end, abandon marks) are built
//! here instead, from diesel's own changeset and predicate nodes: nothing in
//! them is unsafe to cache, and having no static query id they are cached by
//! their SQL text and bind types, so two statements never share a prepared
//! statement unless their SQL is the same.

use std::marker::PhantomData;

use diesel::QueryResult;
use diesel::backend::Backend;
use diesel::query_builder::{AsChangeset, AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::RunQueryDsl;
use diesel::{Column, QuerySource, Table};

/// `UPDATE <table> SET <set> WHERE <filter>`, optionally `RETURNING` one
/// column.
pub struct Update<T: QuerySource, V, P, R = ()> {
    from: T::FromClause,
    set: V,
    filter: P,
    returning: R,
}

/// `RETURNING <column>`, the column unqualified (as SQLite wants it).
#[derive(Clone, Copy, Debug)]
pub struct Returning<C>(PhantomData<C>);

/// `UPDATE table SET set WHERE filter`.
pub fn update<T, V, P>(table: T, set: V, filter: P) -> Update<T, V::Changeset, P>
where
    T: Table,
    V: AsChangeset<Target = T>,
{
    Update {
        from: table.from_clause(),
        set: set.as_changeset(),
        filter,
        returning: (),
    }
}

impl<T: QuerySource, V, P> Update<T, V, P> {
    /// The same statement, returning `column` of each changed row.
    pub fn returning<C: Column<Table = T>>(self, _column: C) -> Update<T, V, P, Returning<C>> {
        Update {
            from: self.from,
            set: self.set,
            filter: self.filter,
            returning: Returning(PhantomData),
        }
    }
}

impl<T, V, P, R, DB> QueryFragment<DB> for Update<T, V, P, R>
where
    DB: Backend,
    T: QuerySource,
    T::FromClause: QueryFragment<DB>,
    V: QueryFragment<DB>,
    P: QueryFragment<DB>,
    R: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.from.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        self.set.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.filter.walk_ast(out.reborrow())?;
        self.returning.walk_ast(out.reborrow())
    }
}

impl<C: Column, DB: Backend> QueryFragment<DB> for Returning<C> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(" RETURNING ");
        out.push_identifier(C::NAME)
    }
}

impl<T: QuerySource, V, P, R> QueryId for Update<T, V, P, R> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<T: QuerySource, V, P, C: Column> Query for Update<T, V, P, Returning<C>> {
    type SqlType = C::SqlType;
}

impl<T: QuerySource, V, P, R, Conn> RunQueryDsl<Conn> for Update<T, V, P, R> {}
