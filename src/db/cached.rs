//! `UPDATE` statements that stay prepared on their connection.
//!
//! diesel prepares each of its `UpdateStatement`s afresh at every execution
//! (its SQL may vary between executions of one Rust type). On MariaDB/MySQL
//! that is a round trip of its own before the execution; on SQLite a parse.
//! The statements every run sends (claim, extend, release, a run's end, abandon marks) are built
//! here instead, from diesel's own changeset and predicate nodes: nothing in
//! them is unsafe to cache, and their query id is made of their parts' ids,
//! so the cache finds them by type without building their SQL again.

use std::marker::PhantomData;

use diesel::QueryResult;
use diesel::backend::Backend;
use diesel::query_builder::{AsChangeset, AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::RunQueryDsl;
use diesel::{Column, QuerySource, Table};

/// `UPDATE <table> SET <set> WHERE <filter>`, optionally `RETURNING` one
/// column.
///
/// `S` is the type of the assignments `update` was given, before they
/// became a changeset: the statement's query id is built from it.
pub(crate) struct Update<T: QuerySource, V, P, R = (), S = ()> {
    from: T::FromClause,
    set: V,
    filter: P,
    returning: R,
    assignments: PhantomData<S>,
}

/// `RETURNING <column>`, the column unqualified (as SQLite wants it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Returning<C>(PhantomData<C>);

/// `UPDATE table SET set WHERE filter`.
pub(crate) fn update<T, V, P>(table: T, set: V, filter: P) -> Update<T, V::Changeset, P, (), V>
where
    T: Table,
    V: AsChangeset<Target = T>,
{
    Update {
        from: table.from_clause(),
        set: set.as_changeset(),
        filter,
        returning: (),
        assignments: PhantomData,
    }
}

impl<T: QuerySource, V, P, S> Update<T, V, P, (), S> {
    /// The same statement, returning `column` of each changed row.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn returning<C: Column<Table = T>>(
        self,
        _column: C,
    ) -> Update<T, V, P, Returning<C>, S> {
        Update {
            from: self.from,
            set: self.set,
            filter: self.filter,
            returning: Returning(PhantomData),
            assignments: PhantomData,
        }
    }
}

impl<T, V, P, R, S, DB> QueryFragment<DB> for Update<T, V, P, R, S>
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

/// The query id of an [`Update`]: its table and the ids of its assignments,
/// filter and returning clause.
pub(crate) struct UpdateId<T, S, P, R>(PhantomData<(T, S, P, R)>);

/// Identified by the types it is built from, as diesel identifies its own
/// queries: its SQL follows from those types alone (every value is a bind,
/// and `Option` assignments, whose SQL depends on their value, have no
/// `QueryId`, so they cannot be used here). A statement whose parts all have
/// static ids is then found in the statement cache by type, without building
/// its SQL text again; one with a part that varies (an `IN` list) is found
/// by its SQL text.
impl<T, V, P, R, S> QueryId for Update<T, V, P, R, S>
where
    T: QuerySource + 'static,
    S: QueryId,
    P: QueryId,
    R: QueryId,
{
    type QueryId = UpdateId<T, S::QueryId, P::QueryId, R::QueryId>;
    const HAS_STATIC_QUERY_ID: bool =
        S::HAS_STATIC_QUERY_ID && P::HAS_STATIC_QUERY_ID && R::HAS_STATIC_QUERY_ID;
}

impl<C: Column + 'static> QueryId for Returning<C> {
    type QueryId = Returning<C>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<T: QuerySource, V, P, C: Column, S> Query for Update<T, V, P, Returning<C>, S> {
    type SqlType = C::SqlType;
}

impl<T: QuerySource, V, P, R, S, Conn> RunQueryDsl<Conn> for Update<T, V, P, R, S> {}
