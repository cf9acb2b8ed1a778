//! The write side of the store: a message or a batch through the send pipeline into the
//! CommitLog, with its consume-queue unit and index entries dispatched under the same lock.

use super::*;

/// Each LMQ a record was dispatched to (its INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET
/// values, as [`lmq::Lmqs::dispatch`] reads them) with its next offset: the record's offset + 1.
fn lmq_next_offsets(names: &str, offsets: &str) -> Vec<(String, i64)> {
    names
        .split(lmq::DISPATCH_SEPARATOR)
        .zip(offsets.split(lmq::DISPATCH_SEPARATOR))
        .filter(|(name, _)| lmq::is_lmq(name))
        .filter_map(|(name, offset)| Some((name.to_string(), offset.parse::<i64>().ok()? + 1)))
        .collect()
}

impl Inner {
    pub(super) fn delay_of(&self, properties: &str) -> i64 {
        let levels = &self.config.message_delay_level;
        get_property(properties, property::DELAY)
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|l| *l > 0)
            .map_or(0, |l| levels[(l.min(levels.len() as i32) - 1) as usize])
    }

    /// The delay levels and the timer rule a put applies now.
    pub(super) fn schedules(&self) -> send::Schedules {
        let c = &self.config;
        send::Schedules {
            delay_levels: c.message_delay_level.len(),
            timer: c.timer_wheel_enable.then_some(send::TimerRule {
                precision_ms: c.timer_precision_ms,
                max_delay_ms: c.timer_max_delay_sec.saturating_mul(1000),
            }),
            now_ms: now_ms(),
        }
    }

    /// Tags code of a record as RocketMQ dispatches it.
    pub(super) fn record_tags_code(
        &self,
        topic: &str,
        properties: &str,
        store_timestamp: i64,
    ) -> i64 {
        if topic == SCHEDULE_TOPIC && get_property(properties, property::DELAY).is_some() {
            return store_timestamp + self.delay_of(properties);
        }
        tags_code(get_property(properties, property::TAGS))
    }

    /// The caller's meta with an IPv4-mapped born host made IPv4 and the host bits of the
    /// sysflag set to match the born and store hosts.
    pub(super) fn with_hosts<'a>(&self, meta: &MessageMeta<'a>) -> MessageMeta<'a> {
        let mut meta = meta.clone();
        meta.born_host = normalize_host(meta.born_host);
        meta.sys_flag = (meta.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6))
            | host_sysflag(&meta.born_host, &self.config.store_host);
        meta
    }

    /// Whether a record of `topic` may name light message queues (enableLmq, and not a retry,
    /// dead-letter, system or schedule topic: MixAll.topicAllowsLMQ). Unlike Java, not the
    /// transactions' topics either (`RMQ_SYS_TRANS_*`, `TRANS_CHECK_MAX_TIME_TOPIC`): Apache
    /// RocketMQ 5.5.0 dispatches a lite message's half into its lite topic (MixAll's "rmq_sys_"
    /// prefix misses the upper-case names), so a lite consumer gets it before the commit, and
    /// again after.
    pub(super) fn lmq_on(&self, topic: &str) -> bool {
        self.config.enable_lmq
            && !topic.starts_with("%RETRY%")
            && !topic.starts_with("%DLQ%")
            && !topic.starts_with("rmq_sys_")
            && !topic.starts_with("RMQ_SYS_TRANS_")
            && topic != "TRANS_CHECK_MAX_TIME_TOPIC"
            && topic != SCHEDULE_TOPIC
    }

    pub(super) fn next_store_timestamp(&self) -> i64 {
        now_ms().max(self.last_store_ts.load(Ordering::Relaxed))
    }

    /// One message through the send pipeline (see [`MessageStore::send`]).
    pub(super) fn put_record(
        &self,
        meta: &MessageMeta,
        body: &[u8],
        properties: &str,
        rw: &Rewrite,
    ) -> Result<PutResult> {
        let levels = &self.config.message_delay_level;
        let rewritten = send::rewrite(
            properties,
            rw,
            meta.topic,
            meta.queue_id,
            meta.sys_flag,
            &self.schedules(),
        )?;
        let props: &str = &rewritten.properties;
        message::validate(meta, body.len(), props.len(), self.config.max_message_size)?;
        let store_host = self.config.store_host;
        let mut meta = self.with_hosts(meta);
        let delay_ms = rewritten.schedule_level.map(|level| {
            meta.topic = SCHEDULE_TOPIC;
            meta.queue_id = level - 1;
            levels[level as usize - 1]
        });
        if let Some(deliver_ms) = rewritten.timer_out_ms {
            self.admit_timer(deliver_ms)?;
            meta.topic = crate::timer::TIMER_TOPIC;
            meta.queue_id = 0;
        }
        let tx = sysflag::transaction_value(meta.sys_flag);
        let dispatched =
            tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE;
        let len = record_len(meta.sys_flag, body.len(), meta.topic.len(), props.len());
        let crc = message::body_crc(body);

        let dp = DispatchProperties::parse(props);

        let _guard = self.put_lock.lock().unwrap();
        self.admit_write()?;
        // A record naming light message queues gets its offset in each now, under the lock
        // (LmqDispatch.wrapLmqDispatch): its properties, and so its length, change.
        let lmq_names = dp
            .multi_dispatch
            .filter(|_| dispatched && self.lmq_on(meta.topic));
        let lmq_offsets = lmq_names.map(|names| lmq::queue_offsets_value(&self.lmqs, names));
        let lmq_props = lmq_offsets
            .as_deref()
            .map(|offsets| lmq::with_queue_offsets(props, offsets));
        let (props, len) = match &lmq_props {
            Some(p) => {
                message::validate(&meta, body.len(), p.len(), self.config.max_message_size)?;
                (
                    p.as_str(),
                    record_len(meta.sys_flag, body.len(), meta.topic.len(), p.len()),
                )
            }
            None => (props, len),
        };
        // Everything the record needs is created and its blocks reserved before it is written:
        // running out of room refuses the message instead of storing half of it.
        let cq = if dispatched {
            Some(
                self.queue_or_create(meta.topic, meta.queue_id)
                    .map_err(StoreError::into_disk_full)?,
            )
        } else {
            None
        };
        let queue_offset = cq.as_ref().map_or(0, |cq| cq.max_offset());
        let indexed = tx != sysflag::TRANSACTION_ROLLBACK_TYPE;
        let prepared = match &cq {
            Some(cq) => cq.prepare(queue_offset, 1),
            None => Ok(()),
        }
        .and_then(|()| match &self.index {
            Some(index) if indexed => index.prepare(dp.key_count()),
            _ => Ok(()),
        })
        .and_then(|()| self.commitlog.reserve(len));
        let (file, pos) = prepared.map_err(StoreError::into_disk_full)?;
        let store_timestamp = self.next_store_timestamp();
        let physical_offset = (file.file_from_offset() + pos as u64) as i64;
        let place = Placement {
            queue_offset,
            physical_offset,
            store_timestamp,
            store_host,
        };
        // SAFETY: we hold the put lock (single writer) and `reserve` returned unpublished space.
        let out = unsafe { file.slice_mut(pos, len) };
        message::encode_record(out, &meta, body, crc, props.as_bytes(), &place);
        file.set_wrote_position(pos + len);
        // The message is stored from here on: a dispatch failure is not the sender's error.
        let mut lmq_arrivals = Vec::new();
        let dispatched = cq
            .as_ref()
            .map_or(Ok(()), |cq| {
                let code = match delay_ms {
                    Some(d) => store_timestamp + d,
                    None => tags_code(dp.tags),
                };
                cq.put(
                    queue_offset,
                    Unit {
                        offset: physical_offset,
                        size: len as i32,
                        tags_code: code,
                    },
                )
            })
            .and_then(|()| match &self.index {
                Some(index) if indexed => index.build_index(
                    meta.topic,
                    dp.uniq_key,
                    dp.keys,
                    physical_offset,
                    store_timestamp,
                ),
                _ => Ok(()),
            })
            .and_then(|()| match (lmq_names, &lmq_offsets) {
                (Some(names), Some(offsets)) if self.config.enable_multi_dispatch => {
                    self.lmqs.dispatch(
                        names,
                        offsets,
                        Unit {
                            offset: physical_offset,
                            size: len as i32,
                            tags_code: tags_code(dp.tags),
                        },
                    )?;
                    lmq_arrivals = lmq_next_offsets(names, offsets);
                    Ok(())
                }
                _ => Ok(()),
            });
        if let Err(e) = dispatched {
            self.dispatch_failed(physical_offset as u64, &e);
        }
        self.last_store_ts.store(store_timestamp, Ordering::Release);
        drop(_guard);

        Ok(PutResult {
            topic: meta.topic.to_string(),
            queue_id: meta.queue_id,
            queue_offset,
            physical_offset,
            wrote_bytes: len,
            store_timestamp,
            store_host,
            wait: rewritten.wait,
            tags_code: tags_code(dp.tags),
            timer_out_ms: rewritten.timer_out_ms,
            lmq_arrivals,
        })
    }

    pub(super) fn put_messages(
        &self,
        meta: &MessageMeta,
        items: &[BatchItem],
        properties: &str,
        rw: &Rewrite,
    ) -> Result<PutBatchResult> {
        if items.is_empty() {
            return Err(StoreError::InvalidArgument("empty batch".into()));
        }
        let tx = sysflag::transaction_value(meta.sys_flag);
        if tx != sysflag::TRANSACTION_NOT_TYPE {
            return Err(StoreError::InvalidArgument(
                "batch messages cannot be transactional".into(),
            ));
        }
        let store_host = self.config.store_host;
        let meta = self.with_hosts(meta);
        // A batch is never delayed: its shared properties only take the edits.
        let rw = Rewrite {
            schedule: false,
            ..*rw
        };
        let shared = send::rewrite(
            properties,
            &rw,
            meta.topic,
            meta.queue_id,
            meta.sys_flag,
            &send::Schedules::NONE,
        )?;
        let props: Vec<_> = items
            .iter()
            .map(|item| message::join_properties(item.properties, &shared.properties))
            .collect();
        let mut total = 0usize;
        let mut lens = Vec::with_capacity(items.len());
        let mut crcs = Vec::with_capacity(items.len());
        for (item, props) in items.iter().zip(&props) {
            message::validate(
                &meta,
                item.body.len(),
                props.len(),
                self.config.max_message_size,
            )?;
            let len = record_len(
                meta.sys_flag,
                item.body.len(),
                meta.topic.len(),
                props.len(),
            );
            lens.push(len);
            crcs.push(message::body_crc(item.body));
            total += len;
        }

        let dps: Vec<DispatchProperties> =
            props.iter().map(|p| DispatchProperties::parse(p)).collect();

        let _guard = self.put_lock.lock().unwrap();
        self.admit_write()?;
        let cq = self
            .queue_or_create(meta.topic, meta.queue_id)
            .map_err(StoreError::into_disk_full)?;
        let first_queue_offset = cq.max_offset();
        let prepared = cq
            .prepare(first_queue_offset, items.len())
            .and_then(|()| match &self.index {
                Some(index) => index.prepare(dps.iter().map(|dp| dp.key_count()).sum()),
                None => Ok(()),
            })
            .and_then(|()| self.commitlog.reserve(total));
        let (file, start) = prepared.map_err(StoreError::into_disk_full)?;
        let store_timestamp = self.next_store_timestamp();
        let base = file.file_from_offset() as i64;
        let mut pos = start;
        let mut physical_offsets = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let len = lens[i];
            let physical_offset = base + pos as i64;
            let place = Placement {
                queue_offset: first_queue_offset + i as i64,
                physical_offset,
                store_timestamp,
                store_host,
            };
            let mut m = meta.clone();
            m.flag = item.flag;
            // SAFETY: single writer under the put lock, inside the reserved, unpublished range.
            let out = unsafe { file.slice_mut(pos, len) };
            message::encode_record(out, &m, item.body, crcs[i], props[i].as_bytes(), &place);
            physical_offsets.push(physical_offset);
            pos += len;
        }
        file.set_wrote_position(pos);
        // Stored from here on (see `put_record`).
        for (i, dp) in dps.iter().enumerate() {
            let dispatched = cq
                .put(
                    first_queue_offset + i as i64,
                    Unit {
                        offset: physical_offsets[i],
                        size: lens[i] as i32,
                        tags_code: tags_code(dp.tags),
                    },
                )
                .and_then(|()| match &self.index {
                    Some(index) => index.build_index(
                        meta.topic,
                        dp.uniq_key,
                        dp.keys,
                        physical_offsets[i],
                        store_timestamp,
                    ),
                    None => Ok(()),
                });
            if let Err(e) = dispatched {
                self.dispatch_failed(physical_offsets[i] as u64, &e);
                break;
            }
        }
        self.last_store_ts.store(store_timestamp, Ordering::Release);
        drop(_guard);

        Ok(PutBatchResult {
            topic: meta.topic.to_string(),
            queue_id: meta.queue_id,
            first_queue_offset,
            physical_offsets,
            wrote_bytes: total,
            store_timestamp,
            store_host,
            wait: shared.wait,
        })
    }
}
