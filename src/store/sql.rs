//! The connection the store's statements run on, SQLite or PostgreSQL, with arguments and rows in
//! one shape. A statement is written once, with SQLite's placeholders (`?1`, or `?` for "the
//! next one"); PostgreSQL receives it with `$1`, `$2`, … numbered the way SQLite numbers them.
//! The few statements the two dialects spell differently choose their text with
//! [`Db::is_postgres`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{IsNull, ToSql, Type};
use rusqlite::types::{ToSqlOutput, ValueRef};

use super::Db;
use crate::error::{Error, Result};

/// Most prepared statements a PostgreSQL connection keeps (statements built for a list of
/// namespaces differ by length; the cache is emptied when it is full).
const MAX_PG_STATEMENTS: usize = 256;

/// The connection inside a [`Db`].
pub(crate) enum Conn {
    Lite(rusqlite::Connection),
    Pg(Box<PgConn>),
}

/// A PostgreSQL connection with its prepared statements, by their SQLite-style text.
pub(crate) struct PgConn {
    client: RefCell<postgres::Client>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    in_transaction: Cell<bool>,
    /// The open transaction appended to the change log (listeners are notified at its commit).
    logged: Cell<bool>,
}

impl PgConn {
    pub(crate) fn new(client: postgres::Client) -> PgConn {
        PgConn {
            client: RefCell::new(client),
            statements: RefCell::new(HashMap::new()),
            in_transaction: Cell::new(false),
            logged: Cell::new(false),
        }
    }

    /// The client for one statement; an error (not a panic) when a statement runs inside the row
    /// callback of another on the same connection.
    pub(super) fn client_mut(&self) -> Result<std::cell::RefMut<'_, postgres::Client>> {
        self.client.try_borrow_mut().map_err(|_| {
            Error::Internal("a statement ran while another's rows were being read".into())
        })
    }

    fn statement(&self, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let prepared = self.client_mut()?.prepare(&numbered(sql))?;
        let mut cache = self.statements.borrow_mut();
        if cache.len() >= MAX_PG_STATEMENTS {
            cache.clear();
        }
        cache.insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }
}

/// A statement argument, borrowed from the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// What can be passed as an [`Arg`].
pub trait ToArg {
    fn to_arg(&self) -> Arg<'_>;
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Int(*self as i64)
            }
        }
    )*};
}
int_arg!(i64, i32, u32, usize);

impl ToArg for bool {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}

impl ToArg for f64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        match self {
            Some(v) => v.to_arg(),
            None => Arg::Null,
        }
    }
}

impl<'a> ToArg for Arg<'a> {
    fn to_arg(&self) -> Arg<'_> {
        *self
    }
}

/// `args![a, b, …]`: the arguments of a statement, as a slice of [`Arg`].
macro_rules! args {
    ($($e:expr),* $(,)?) => {
        &[$($crate::store::ToArg::to_arg(&$e)),*][..]
    };
}
pub(crate) use args;

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(i) => ValueRef::Integer(i),
            Arg::Real(f) => ValueRef::Real(f),
            Arg::Text(s) => ValueRef::Text(s.as_bytes()),
            Arg::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl ToSql for Arg<'_> {
    /// Sends the value as the type PostgreSQL inferred for the parameter: integers also as
    /// smaller integers, floats or booleans (SQLite keeps booleans as integers).
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, BoxError> {
        match *self {
            Arg::Null => Ok(IsNull::Yes),
            Arg::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                Type::FLOAT4 => (i as f32).to_sql(ty, out),
                _ => Err(format!("an integer cannot be sent as {ty}").into()),
            },
            Arg::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (f as f32).to_sql(ty, out),
                _ => Err(format!("a number cannot be sent as {ty}").into()),
            },
            // Checked here: the client would send the bytes as they are, whatever the type.
            Arg::Text(s) if <&str as ToSql>::accepts(ty) => s.to_sql(ty, out),
            Arg::Text(_) => Err(format!("text cannot be sent as {ty}").into()),
            Arg::Blob(b) if *ty == Type::BYTEA => b.to_sql(ty, out),
            Arg::Blob(_) => Err(format!("bytes cannot be sent as {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// One row of a result, as the closures of [`Db`]'s queries see it.
pub enum Row<'a> {
    Lite(&'a rusqlite::Row<'a>),
    Pg(&'a postgres::Row),
}

impl Row<'_> {
    /// Column `i` as `T` (`Option<T>` for a column that may be NULL).
    pub fn get<T: FromColumn>(&self, i: usize) -> Result<T> {
        T::from_column(self, i)
    }

    /// Column `i` as text, borrowed from the row.
    pub fn get_str(&self, i: usize) -> Result<&str> {
        match self {
            Row::Lite(r) => Ok(r.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?),
            Row::Pg(r) => Ok(r.try_get::<_, &str>(i)?),
        }
    }

    /// Column `i` as bytes, borrowed from the row.
    pub fn get_blob(&self, i: usize) -> Result<&[u8]> {
        match self {
            Row::Lite(r) => Ok(r.get_ref(i)?.as_blob().map_err(rusqlite::Error::from)?),
            Row::Pg(r) => Ok(r.try_get::<_, &[u8]>(i)?),
        }
    }
}

/// A value a column can be read as.
pub trait FromColumn: Sized {
    fn from_column(row: &Row<'_>, i: usize) -> Result<Self>;
}

/// A value that is never NULL in a column; `Option` of it reads NULL as `None`.
pub trait Scalar: Sized {
    fn from_lite(v: ValueRef<'_>) -> Option<Self>;
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError>;
    const NAME: &'static str;
}

fn column_error(i: usize, want: &str, got: impl std::fmt::Display) -> Error {
    Error::Corrupted {
        what: "database row".into(),
        reason: format!("column {i} is {got}, not {want}"),
    }
}

fn scalar<T: Scalar>(row: &Row<'_>, i: usize) -> Result<Option<T>> {
    match row {
        Row::Lite(r) => {
            let v = r.get_ref(i)?;
            if v == ValueRef::Null {
                return Ok(None);
            }
            T::from_lite(v)
                .map(Some)
                .ok_or_else(|| column_error(i, T::NAME, format!("{:?}", v.data_type())))
        }
        Row::Pg(r) => T::from_pg(r, i).map_err(|e| column_error(i, T::NAME, e)),
    }
}

impl<T: Scalar> FromColumn for Option<T> {
    fn from_column(row: &Row<'_>, i: usize) -> Result<Self> {
        scalar(row, i)
    }
}

macro_rules! not_null {
    ($($t:ty),*) => {$(
        impl FromColumn for $t {
            fn from_column(row: &Row<'_>, i: usize) -> Result<Self> {
                scalar(row, i)?.ok_or_else(|| column_error(i, <$t as Scalar>::NAME, "NULL"))
            }
        }
    )*};
}
not_null!(i64, f64, bool, String, Vec<u8>);

/// Reads PostgreSQL column `i` of a type in `$ty` as `Option<$rust>`, converted by `$conv`.
fn pg_int(row: &postgres::Row, i: usize) -> std::result::Result<Option<i64>, BoxError> {
    Ok(match *row.columns()[i].type_() {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?,
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(i64::from),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(i64::from),
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(i64::from),
        ref ty => return Err(format!("of type {ty}").into()),
    })
}

impl Scalar for i64 {
    const NAME: &'static str = "an integer";
    fn from_lite(v: ValueRef<'_>) -> Option<Self> {
        match v {
            ValueRef::Integer(i) => Some(i),
            _ => None,
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError> {
        pg_int(row, i)
    }
}

impl Scalar for bool {
    const NAME: &'static str = "a boolean";
    fn from_lite(v: ValueRef<'_>) -> Option<Self> {
        i64::from_lite(v).map(|i| i != 0)
    }
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError> {
        Ok(pg_int(row, i)?.map(|i| i != 0))
    }
}

impl Scalar for f64 {
    const NAME: &'static str = "a number";
    fn from_lite(v: ValueRef<'_>) -> Option<Self> {
        match v {
            ValueRef::Real(f) => Some(f),
            ValueRef::Integer(i) => Some(i as f64),
            _ => None,
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError> {
        Ok(match *row.columns()[i].type_() {
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?,
            Type::FLOAT4 => row.try_get::<_, Option<f32>>(i)?.map(f64::from),
            _ => pg_int(row, i)?.map(|i| i as f64),
        })
    }
}

impl Scalar for String {
    const NAME: &'static str = "text";
    fn from_lite(v: ValueRef<'_>) -> Option<Self> {
        match v {
            // Valid UTF-8 (every text this server writes) is copied after the fast check;
            // only bytes another writer stored invalid pay for the lossy conversion.
            ValueRef::Text(t) => Some(match std::str::from_utf8(t) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(t).into_owned(),
            }),
            _ => None,
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError> {
        Ok(row.try_get::<_, Option<String>>(i)?)
    }
}

impl Scalar for Vec<u8> {
    const NAME: &'static str = "bytes";
    fn from_lite(v: ValueRef<'_>) -> Option<Self> {
        match v {
            ValueRef::Blob(b) => Some(b.to_vec()),
            _ => None,
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> std::result::Result<Option<Self>, BoxError> {
        Ok(row.try_get::<_, Option<Vec<u8>>>(i)?)
    }
}

/// `sql` with SQLite's placeholders made PostgreSQL's: `?N` becomes `$N`, and a bare `?` the
/// number after the largest used so far (SQLite's rule). Quoted text is left alone.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut largest = 0u32;
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
            out.push(c);
            continue;
        }
        if c != '?' || quoted {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let n = match digits.parse::<u32>() {
            Ok(n) => n,
            Err(_) => largest + 1,
        };
        largest = largest.max(n);
        out.push('$');
        out.push_str(&n.to_string());
    }
    out
}

fn pg_args<'a>(args: &'a [Arg<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

impl Db {
    /// True on PostgreSQL: for the few statements whose text differs.
    pub fn is_postgres(&self) -> bool {
        matches!(self.conn, Conn::Pg(_))
    }

    /// Runs one statement; returns the number of rows it changed.
    pub fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize> {
        match &self.conn {
            Conn::Lite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args))?),
            Conn::Pg(c) => {
                let stmt = c.statement(sql)?;
                Ok(c.client_mut()?.execute(&stmt, &pg_args(args))? as usize)
            }
        }
    }

    /// Runs statements without arguments (several, separated by `;`).
    pub fn batch(&self, sql: &str) -> Result<()> {
        match &self.conn {
            Conn::Lite(c) => Ok(c.execute_batch(sql)?),
            Conn::Pg(c) => Ok(c.client_mut()?.batch_execute(sql)?),
        }
    }

    /// The first row of a query made by `f`, or `None` when it has none.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match &self.conn {
            Conn::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                match rows.next()? {
                    Some(r) => f(&Row::Lite(r)).map(Some),
                    None => Ok(None),
                }
            }
            Conn::Pg(c) => {
                let stmt = c.statement(sql)?;
                let mut client = c.client_mut()?;
                let mut rows = client.query_raw(&stmt, args.iter())?;
                let first = rows.next()?;
                // Read the rest of the answer so the connection is ready for the next statement
                // (an iterator that has ended must not be asked again).
                if first.is_some() {
                    while rows.next()?.is_some() {}
                }
                drop(rows);
                drop(client);
                match first {
                    Some(r) => f(&Row::Pg(&r)).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    /// The first row of a query made by `f`; an error when it has none.
    pub fn query_one<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, args, f)?
            .ok_or_else(|| Error::Internal(format!("a query returned no row: {sql}")))
    }

    /// Every row of a query, each made by `f`.
    pub fn query_all<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.for_each(sql, args, |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` with every row of a query as it arrives (rows are not gathered first).
    pub fn for_each(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<()>,
    ) -> Result<()> {
        match &self.conn {
            Conn::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                while let Some(r) = rows.next()? {
                    f(&Row::Lite(r))?;
                }
                Ok(())
            }
            Conn::Pg(c) => {
                let stmt = c.statement(sql)?;
                let mut client = c.client_mut()?;
                let mut rows = client.query_raw(&stmt, args.iter())?;
                while let Some(r) = rows.next()? {
                    f(&Row::Pg(&r))?;
                }
                Ok(())
            }
        }
    }

    /// True inside a transaction this connection opened.
    pub(crate) fn in_transaction(&self) -> bool {
        match &self.conn {
            Conn::Lite(c) => !c.is_autocommit(),
            Conn::Pg(c) => c.in_transaction.get(),
        }
    }

    /// Opens (`begin`), commits or rolls back a transaction, tracking whether one is open.
    pub(crate) fn transaction_step(&self, sql: &str, open_after: bool) -> Result<()> {
        match &self.conn {
            Conn::Lite(c) => Ok(c.execute_batch(sql)?),
            Conn::Pg(c) => {
                let res = c.client_mut()?.batch_execute(sql);
                // A failed COMMIT or ROLLBACK still ends the transaction on the server.
                c.in_transaction.set(open_after && res.is_ok());
                Ok(res?)
            }
        }
    }

    /// Notes that the open transaction appended to the change log.
    pub(crate) fn mark_logged(&self) {
        if let Conn::Pg(c) = &self.conn {
            c.logged.set(true);
        }
    }

    /// Whether the open transaction appended to the change log, clearing the note.
    pub(crate) fn take_logged(&self) -> bool {
        match &self.conn {
            Conn::Lite(_) => false,
            Conn::Pg(c) => c.logged.replace(false),
        }
    }

    /// True when the connection is gone (the server closed it or the network failed): it is
    /// dropped instead of reused.
    pub(crate) fn is_broken(&self) -> bool {
        match &self.conn {
            Conn::Lite(_) => false,
            Conn::Pg(c) => c.client.try_borrow().is_ok_and(|c| c.is_closed()),
        }
    }
}

#[cfg(test)]
impl Db {
    /// The SQLite connection, for tests of SQLite itself.
    pub(crate) fn lite(&self) -> &rusqlite::Connection {
        match &self.conn {
            Conn::Lite(c) => c,
            Conn::Pg(_) => panic!("a SQLite test ran on PostgreSQL"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_as_sqlite_numbers_them() {
        assert_eq!(numbered("a = ?1 AND b = ?2"), "a = $1 AND b = $2");
        assert_eq!(numbered("x IN (?, ?) LIMIT ?"), "x IN ($1, $2) LIMIT $3");
        assert_eq!(
            numbered("ns = ?1 AND t > ?2 AND k IN (?, ?)"),
            "ns = $1 AND t > $2 AND k IN ($3, $4)"
        );
        assert_eq!(numbered("m = '?' AND x = ?1"), "m = '?' AND x = $1");
        assert_eq!(numbered("a = ?7 OR b = ?7"), "a = $7 OR b = $7");
    }
}
