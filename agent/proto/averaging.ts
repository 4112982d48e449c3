/* eslint-disable require-yield */

import { decodeMessage, encodeMessage, enumeration, MaxLengthError, message, streamMessage } from 'protons-runtime'
import { alloc as uint8ArrayAlloc } from 'uint8arrays/alloc'
import type { Codec, DecodeOptions } from 'protons-runtime'
import type { Uint8ArrayList } from 'uint8arraylist'

export enum PeerMode {
  NODE = 'NODE',
  CLIENT = 'CLIENT',
  AUXILIARY = 'AUXILIARY'
}

enum __PeerModeValues {
  NODE = 0,
  CLIENT = 1,
  AUXILIARY = 2
}

export namespace PeerMode {
  export const codec = (): Codec<PeerMode> => {
    return enumeration<PeerMode>(__PeerModeValues)
  }
}

export interface PeerInfo {
  mode: PeerMode
  bandwidth?: number
  weight: number
  userData: Uint8Array
  dataPort: number
  addrs: Uint8Array[]
  round: number
  secondsNone?: number
  secondsFloat16?: number
  dataAddrs: Uint8Array[]
  bandwidthMeasured?: boolean
  base?: Uint8Array
  outerState?: Uint8Array
}

export namespace PeerInfo {
  let _codec: Codec<PeerInfo>

  export const codec = (): Codec<PeerInfo> => {
    if (_codec == null) {
      _codec = message<PeerInfo>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if (obj.mode != null && __PeerModeValues[obj.mode] !== 0) {
          w.uint32(8)
          PeerMode.codec().encode(obj.mode, w)
        }

        if (obj.bandwidth != null) {
          w.uint32(17)
          w.double(obj.bandwidth)
        }

        if ((obj.weight != null && obj.weight !== 0)) {
          w.uint32(25)
          w.double(obj.weight)
        }

        if ((obj.userData != null && obj.userData.byteLength > 0)) {
          w.uint32(34)
          w.bytes(obj.userData)
        }

        if ((obj.dataPort != null && obj.dataPort !== 0)) {
          w.uint32(40)
          w.uint32(obj.dataPort)
        }

        if (obj.addrs != null && obj.addrs.length > 0) {
          for (const value of obj.addrs) {
            w.uint32(50)
            w.bytes(value)
          }
        }

        if ((obj.round != null && obj.round !== 0)) {
          w.uint32(57)
          w.double(obj.round)
        }

        if (obj.secondsNone != null) {
          w.uint32(65)
          w.double(obj.secondsNone)
        }

        if (obj.secondsFloat16 != null) {
          w.uint32(73)
          w.double(obj.secondsFloat16)
        }

        if (obj.dataAddrs != null && obj.dataAddrs.length > 0) {
          for (const value of obj.dataAddrs) {
            w.uint32(82)
            w.bytes(value)
          }
        }

        if (obj.bandwidthMeasured != null) {
          w.uint32(88)
          w.bool(obj.bandwidthMeasured)
        }

        if (obj.base != null) {
          w.uint32(98)
          w.bytes(obj.base)
        }

        if (obj.outerState != null) {
          w.uint32(106)
          w.bytes(obj.outerState)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          mode: PeerMode.NODE,
          weight: 0,
          userData: uint8ArrayAlloc(0),
          dataPort: 0,
          addrs: [],
          round: 0,
          dataAddrs: []
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.mode = PeerMode.codec().decode(reader)
              break
            }
            case 2: {
              obj.bandwidth = reader.double()
              break
            }
            case 3: {
              obj.weight = reader.double()
              break
            }
            case 4: {
              obj.userData = reader.bytes()
              break
            }
            case 5: {
              obj.dataPort = reader.uint32()
              break
            }
            case 6: {
              if (opts.limits?.addrs != null && obj.addrs.length === opts.limits.addrs) {
                throw new MaxLengthError('Decode error - repeated field "addrs" had too many elements')
              }

              obj.addrs.push(reader.bytes())
              break
            }
            case 7: {
              obj.round = reader.double()
              break
            }
            case 8: {
              obj.secondsNone = reader.double()
              break
            }
            case 9: {
              obj.secondsFloat16 = reader.double()
              break
            }
            case 10: {
              if (opts.limits?.dataAddrs != null && obj.dataAddrs.length === opts.limits.dataAddrs) {
                throw new MaxLengthError('Decode error - repeated field "dataAddrs" had too many elements')
              }

              obj.dataAddrs.push(reader.bytes())
              break
            }
            case 11: {
              obj.bandwidthMeasured = reader.bool()
              break
            }
            case 12: {
              obj.base = reader.bytes()
              break
            }
            case 13: {
              obj.outerState = reader.bytes()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          addrs: 0,
          dataAddrs: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.mode`,
                value: PeerMode.codec().decode(reader)
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.bandwidth`,
                value: reader.double()
              }
              break
            }
            case 3: {
              yield {
                field: `${prefix}.weight`,
                value: reader.double()
              }
              break
            }
            case 4: {
              yield {
                field: `${prefix}.userData`,
                value: reader.bytes()
              }
              break
            }
            case 5: {
              yield {
                field: `${prefix}.dataPort`,
                value: reader.uint32()
              }
              break
            }
            case 6: {
              if (opts.limits?.addrs != null && obj.addrs === opts.limits.addrs) {
                throw new MaxLengthError('Streaming decode error - repeated field "addrs" had too many elements')
              }

              yield {
                field: `${prefix}.addrs[]`,
                index: obj.addrs,
                value: reader.bytes()
              }

              obj.addrs++

              break
            }
            case 7: {
              yield {
                field: `${prefix}.round`,
                value: reader.double()
              }
              break
            }
            case 8: {
              yield {
                field: `${prefix}.secondsNone`,
                value: reader.double()
              }
              break
            }
            case 9: {
              yield {
                field: `${prefix}.secondsFloat16`,
                value: reader.double()
              }
              break
            }
            case 10: {
              if (opts.limits?.dataAddrs != null && obj.dataAddrs === opts.limits.dataAddrs) {
                throw new MaxLengthError('Streaming decode error - repeated field "dataAddrs" had too many elements')
              }

              yield {
                field: `${prefix}.dataAddrs[]`,
                index: obj.dataAddrs,
                value: reader.bytes()
              }

              obj.dataAddrs++

              break
            }
            case 11: {
              yield {
                field: `${prefix}.bandwidthMeasured`,
                value: reader.bool()
              }
              break
            }
            case 12: {
              yield {
                field: `${prefix}.base`,
                value: reader.bytes()
              }
              break
            }
            case 13: {
              yield {
                field: `${prefix}.outerState`,
                value: reader.bytes()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface PeerInfoModeFieldEvent {
    field: '$.mode'
    value: PeerMode
  }

  export interface PeerInfoBandwidthFieldEvent {
    field: '$.bandwidth'
    value: number
  }

  export interface PeerInfoWeightFieldEvent {
    field: '$.weight'
    value: number
  }

  export interface PeerInfoUserDataFieldEvent {
    field: '$.userData'
    value: Uint8Array
  }

  export interface PeerInfoDataPortFieldEvent {
    field: '$.dataPort'
    value: number
  }

  export interface PeerInfoAddrsFieldEvent {
    field: '$.addrs[]'
    index: number
    value: Uint8Array
  }

  export interface PeerInfoRoundFieldEvent {
    field: '$.round'
    value: number
  }

  export interface PeerInfoSecondsNoneFieldEvent {
    field: '$.secondsNone'
    value: number
  }

  export interface PeerInfoSecondsFloat16FieldEvent {
    field: '$.secondsFloat16'
    value: number
  }

  export interface PeerInfoDataAddrsFieldEvent {
    field: '$.dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export interface PeerInfoBandwidthMeasuredFieldEvent {
    field: '$.bandwidthMeasured'
    value: boolean
  }

  export interface PeerInfoBaseFieldEvent {
    field: '$.base'
    value: Uint8Array
  }

  export interface PeerInfoOuterStateFieldEvent {
    field: '$.outerState'
    value: Uint8Array
  }

  export function encode (obj: Partial<PeerInfo>): Uint8Array {
    return encodeMessage(obj, PeerInfo.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<PeerInfo>): PeerInfo {
    return decodeMessage(buf, PeerInfo.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<PeerInfo>): Generator<PeerInfoModeFieldEvent | PeerInfoBandwidthFieldEvent | PeerInfoWeightFieldEvent | PeerInfoUserDataFieldEvent | PeerInfoDataPortFieldEvent | PeerInfoAddrsFieldEvent | PeerInfoRoundFieldEvent | PeerInfoSecondsNoneFieldEvent | PeerInfoSecondsFloat16FieldEvent | PeerInfoDataAddrsFieldEvent | PeerInfoBandwidthMeasuredFieldEvent | PeerInfoBaseFieldEvent | PeerInfoOuterStateFieldEvent> {
    return streamMessage(buf, PeerInfo.codec(), opts)
  }
}

export interface RendezvousEntry {
  peerId: Uint8Array
  expiration: number
  looking: boolean
  priority: number
  addrs: Uint8Array[]
  dataPort?: number
  dataAddrs: Uint8Array[]
}

export namespace RendezvousEntry {
  let _codec: Codec<RendezvousEntry>

  export const codec = (): Codec<RendezvousEntry> => {
    if (_codec == null) {
      _codec = message<RendezvousEntry>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.peerId != null && obj.peerId.byteLength > 0)) {
          w.uint32(10)
          w.bytes(obj.peerId)
        }

        if ((obj.expiration != null && obj.expiration !== 0)) {
          w.uint32(17)
          w.double(obj.expiration)
        }

        if ((obj.looking != null && obj.looking !== false)) {
          w.uint32(24)
          w.bool(obj.looking)
        }

        if ((obj.priority != null && obj.priority !== 0)) {
          w.uint32(33)
          w.double(obj.priority)
        }

        if (obj.addrs != null && obj.addrs.length > 0) {
          for (const value of obj.addrs) {
            w.uint32(42)
            w.bytes(value)
          }
        }

        if (obj.dataPort != null) {
          w.uint32(48)
          w.uint32(obj.dataPort)
        }

        if (obj.dataAddrs != null && obj.dataAddrs.length > 0) {
          for (const value of obj.dataAddrs) {
            w.uint32(58)
            w.bytes(value)
          }
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          peerId: uint8ArrayAlloc(0),
          expiration: 0,
          looking: false,
          priority: 0,
          addrs: [],
          dataAddrs: []
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.peerId = reader.bytes()
              break
            }
            case 2: {
              obj.expiration = reader.double()
              break
            }
            case 3: {
              obj.looking = reader.bool()
              break
            }
            case 4: {
              obj.priority = reader.double()
              break
            }
            case 5: {
              if (opts.limits?.addrs != null && obj.addrs.length === opts.limits.addrs) {
                throw new MaxLengthError('Decode error - repeated field "addrs" had too many elements')
              }

              obj.addrs.push(reader.bytes())
              break
            }
            case 6: {
              obj.dataPort = reader.uint32()
              break
            }
            case 7: {
              if (opts.limits?.dataAddrs != null && obj.dataAddrs.length === opts.limits.dataAddrs) {
                throw new MaxLengthError('Decode error - repeated field "dataAddrs" had too many elements')
              }

              obj.dataAddrs.push(reader.bytes())
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          addrs: 0,
          dataAddrs: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.peerId`,
                value: reader.bytes()
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.expiration`,
                value: reader.double()
              }
              break
            }
            case 3: {
              yield {
                field: `${prefix}.looking`,
                value: reader.bool()
              }
              break
            }
            case 4: {
              yield {
                field: `${prefix}.priority`,
                value: reader.double()
              }
              break
            }
            case 5: {
              if (opts.limits?.addrs != null && obj.addrs === opts.limits.addrs) {
                throw new MaxLengthError('Streaming decode error - repeated field "addrs" had too many elements')
              }

              yield {
                field: `${prefix}.addrs[]`,
                index: obj.addrs,
                value: reader.bytes()
              }

              obj.addrs++

              break
            }
            case 6: {
              yield {
                field: `${prefix}.dataPort`,
                value: reader.uint32()
              }
              break
            }
            case 7: {
              if (opts.limits?.dataAddrs != null && obj.dataAddrs === opts.limits.dataAddrs) {
                throw new MaxLengthError('Streaming decode error - repeated field "dataAddrs" had too many elements')
              }

              yield {
                field: `${prefix}.dataAddrs[]`,
                index: obj.dataAddrs,
                value: reader.bytes()
              }

              obj.dataAddrs++

              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface RendezvousEntryPeerIdFieldEvent {
    field: '$.peerId'
    value: Uint8Array
  }

  export interface RendezvousEntryExpirationFieldEvent {
    field: '$.expiration'
    value: number
  }

  export interface RendezvousEntryLookingFieldEvent {
    field: '$.looking'
    value: boolean
  }

  export interface RendezvousEntryPriorityFieldEvent {
    field: '$.priority'
    value: number
  }

  export interface RendezvousEntryAddrsFieldEvent {
    field: '$.addrs[]'
    index: number
    value: Uint8Array
  }

  export interface RendezvousEntryDataPortFieldEvent {
    field: '$.dataPort'
    value: number
  }

  export interface RendezvousEntryDataAddrsFieldEvent {
    field: '$.dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export function encode (obj: Partial<RendezvousEntry>): Uint8Array {
    return encodeMessage(obj, RendezvousEntry.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousEntry>): RendezvousEntry {
    return decodeMessage(buf, RendezvousEntry.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousEntry>): Generator<RendezvousEntryPeerIdFieldEvent | RendezvousEntryExpirationFieldEvent | RendezvousEntryLookingFieldEvent | RendezvousEntryPriorityFieldEvent | RendezvousEntryAddrsFieldEvent | RendezvousEntryDataPortFieldEvent | RendezvousEntryDataAddrsFieldEvent> {
    return streamMessage(buf, RendezvousEntry.codec(), opts)
  }
}

export interface RendezvousRequest {
  key: string
  store?: RendezvousEntry
}

export namespace RendezvousRequest {
  let _codec: Codec<RendezvousRequest>

  export const codec = (): Codec<RendezvousRequest> => {
    if (_codec == null) {
      _codec = message<RendezvousRequest>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.key != null && obj.key !== '')) {
          w.uint32(10)
          w.string(obj.key)
        }

        if (obj.store != null) {
          w.uint32(18)
          RendezvousEntry.codec().encode(obj.store, w)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          key: ''
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.key = reader.string()
              break
            }
            case 2: {
              obj.store = RendezvousEntry.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.store
              })
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.key`,
                value: reader.string()
              }
              break
            }
            case 2: {
              yield * RendezvousEntry.codec().stream(reader, reader.uint32(), `${prefix}.store`, {
                limits: opts.limits?.store
              })

              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface RendezvousRequestKeyFieldEvent {
    field: '$.key'
    value: string
  }

  export interface RendezvousRequestStorePeerIdFieldEvent {
    field: '$.store.peerId'
    value: Uint8Array
  }

  export interface RendezvousRequestStoreExpirationFieldEvent {
    field: '$.store.expiration'
    value: number
  }

  export interface RendezvousRequestStoreLookingFieldEvent {
    field: '$.store.looking'
    value: boolean
  }

  export interface RendezvousRequestStorePriorityFieldEvent {
    field: '$.store.priority'
    value: number
  }

  export interface RendezvousRequestStoreAddrsFieldEvent {
    field: '$.store.addrs[]'
    index: number
    value: Uint8Array
  }

  export interface RendezvousRequestStoreDataPortFieldEvent {
    field: '$.store.dataPort'
    value: number
  }

  export interface RendezvousRequestStoreDataAddrsFieldEvent {
    field: '$.store.dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export function encode (obj: Partial<RendezvousRequest>): Uint8Array {
    return encodeMessage(obj, RendezvousRequest.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousRequest>): RendezvousRequest {
    return decodeMessage(buf, RendezvousRequest.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousRequest>): Generator<RendezvousRequestKeyFieldEvent | RendezvousRequestStorePeerIdFieldEvent | RendezvousRequestStoreExpirationFieldEvent | RendezvousRequestStoreLookingFieldEvent | RendezvousRequestStorePriorityFieldEvent | RendezvousRequestStoreAddrsFieldEvent | RendezvousRequestStoreDataPortFieldEvent | RendezvousRequestStoreDataAddrsFieldEvent> {
    return streamMessage(buf, RendezvousRequest.codec(), opts)
  }
}

export interface RendezvousPeer {
  peerId: Uint8Array
  addrs: Uint8Array[]
}

export namespace RendezvousPeer {
  let _codec: Codec<RendezvousPeer>

  export const codec = (): Codec<RendezvousPeer> => {
    if (_codec == null) {
      _codec = message<RendezvousPeer>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.peerId != null && obj.peerId.byteLength > 0)) {
          w.uint32(10)
          w.bytes(obj.peerId)
        }

        if (obj.addrs != null && obj.addrs.length > 0) {
          for (const value of obj.addrs) {
            w.uint32(18)
            w.bytes(value)
          }
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          peerId: uint8ArrayAlloc(0),
          addrs: []
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.peerId = reader.bytes()
              break
            }
            case 2: {
              if (opts.limits?.addrs != null && obj.addrs.length === opts.limits.addrs) {
                throw new MaxLengthError('Decode error - repeated field "addrs" had too many elements')
              }

              obj.addrs.push(reader.bytes())
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          addrs: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.peerId`,
                value: reader.bytes()
              }
              break
            }
            case 2: {
              if (opts.limits?.addrs != null && obj.addrs === opts.limits.addrs) {
                throw new MaxLengthError('Streaming decode error - repeated field "addrs" had too many elements')
              }

              yield {
                field: `${prefix}.addrs[]`,
                index: obj.addrs,
                value: reader.bytes()
              }

              obj.addrs++

              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface RendezvousPeerPeerIdFieldEvent {
    field: '$.peerId'
    value: Uint8Array
  }

  export interface RendezvousPeerAddrsFieldEvent {
    field: '$.addrs[]'
    index: number
    value: Uint8Array
  }

  export function encode (obj: Partial<RendezvousPeer>): Uint8Array {
    return encodeMessage(obj, RendezvousPeer.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousPeer>): RendezvousPeer {
    return decodeMessage(buf, RendezvousPeer.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousPeer>): Generator<RendezvousPeerPeerIdFieldEvent | RendezvousPeerAddrsFieldEvent> {
    return streamMessage(buf, RendezvousPeer.codec(), opts)
  }
}

export interface RendezvousResponse {
  entries: RendezvousEntry[]
  error: string
  closer: RendezvousPeer[]
}

export namespace RendezvousResponse {
  let _codec: Codec<RendezvousResponse>

  export const codec = (): Codec<RendezvousResponse> => {
    if (_codec == null) {
      _codec = message<RendezvousResponse>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if (obj.entries != null && obj.entries.length > 0) {
          for (const value of obj.entries) {
            w.uint32(10)
            RendezvousEntry.codec().encode(value, w)
          }
        }

        if ((obj.error != null && obj.error !== '')) {
          w.uint32(18)
          w.string(obj.error)
        }

        if (obj.closer != null && obj.closer.length > 0) {
          for (const value of obj.closer) {
            w.uint32(26)
            RendezvousPeer.codec().encode(value, w)
          }
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          entries: [],
          error: '',
          closer: []
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              if (opts.limits?.entries != null && obj.entries.length === opts.limits.entries) {
                throw new MaxLengthError('Decode error - repeated field "entries" had too many elements')
              }

              obj.entries.push(RendezvousEntry.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.entries$
              }))
              break
            }
            case 2: {
              obj.error = reader.string()
              break
            }
            case 3: {
              if (opts.limits?.closer != null && obj.closer.length === opts.limits.closer) {
                throw new MaxLengthError('Decode error - repeated field "closer" had too many elements')
              }

              obj.closer.push(RendezvousPeer.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.closer$
              }))
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          entries: 0,
          closer: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              if (opts.limits?.entries != null && obj.entries === opts.limits.entries) {
                throw new MaxLengthError('Streaming decode error - repeated field "entries" had too many elements')
              }

              for (const evt of RendezvousEntry.codec().stream(reader, reader.uint32(), `${prefix}.entries[]`, {
                limits: opts.limits?.entries$
              })) {
                yield {
                  ...evt,
                  index: obj.entries
                }
              }

              obj.entries++

              break
            }
            case 2: {
              yield {
                field: `${prefix}.error`,
                value: reader.string()
              }
              break
            }
            case 3: {
              if (opts.limits?.closer != null && obj.closer === opts.limits.closer) {
                throw new MaxLengthError('Streaming decode error - repeated field "closer" had too many elements')
              }

              for (const evt of RendezvousPeer.codec().stream(reader, reader.uint32(), `${prefix}.closer[]`, {
                limits: opts.limits?.closer$
              })) {
                yield {
                  ...evt,
                  index: obj.closer
                }
              }

              obj.closer++

              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface RendezvousResponseEntriesPeerIdFieldEvent {
    field: '$.entries[].peerId'
    value: Uint8Array
    index: number
  }

  export interface RendezvousResponseEntriesExpirationFieldEvent {
    field: '$.entries[].expiration'
    value: number
    index: number
  }

  export interface RendezvousResponseEntriesLookingFieldEvent {
    field: '$.entries[].looking'
    value: boolean
    index: number
  }

  export interface RendezvousResponseEntriesPriorityFieldEvent {
    field: '$.entries[].priority'
    value: number
    index: number
  }

  export interface RendezvousResponseEntriesAddrsFieldEvent {
    field: '$.entries[].addrs[]'
    index: number
    value: Uint8Array
  }

  export interface RendezvousResponseEntriesDataPortFieldEvent {
    field: '$.entries[].dataPort'
    value: number
    index: number
  }

  export interface RendezvousResponseEntriesDataAddrsFieldEvent {
    field: '$.entries[].dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export interface RendezvousResponseErrorFieldEvent {
    field: '$.error'
    value: string
  }

  export interface RendezvousResponseCloserPeerIdFieldEvent {
    field: '$.closer[].peerId'
    value: Uint8Array
    index: number
  }

  export interface RendezvousResponseCloserAddrsFieldEvent {
    field: '$.closer[].addrs[]'
    index: number
    value: Uint8Array
  }

  export function encode (obj: Partial<RendezvousResponse>): Uint8Array {
    return encodeMessage(obj, RendezvousResponse.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousResponse>): RendezvousResponse {
    return decodeMessage(buf, RendezvousResponse.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<RendezvousResponse>): Generator<RendezvousResponseEntriesPeerIdFieldEvent | RendezvousResponseEntriesExpirationFieldEvent | RendezvousResponseEntriesLookingFieldEvent | RendezvousResponseEntriesPriorityFieldEvent | RendezvousResponseEntriesAddrsFieldEvent | RendezvousResponseEntriesDataPortFieldEvent | RendezvousResponseEntriesDataAddrsFieldEvent | RendezvousResponseErrorFieldEvent | RendezvousResponseCloserPeerIdFieldEvent | RendezvousResponseCloserAddrsFieldEvent> {
    return streamMessage(buf, RendezvousResponse.codec(), opts)
  }
}

export enum MatchCode {
  NO_CODE = 'NO_CODE',
  ACCEPTED = 'ACCEPTED',
  BEGIN_ALLREDUCE = 'BEGIN_ALLREDUCE',
  NOT_DECLARED = 'NOT_DECLARED',
  NOT_A_LEADER = 'NOT_A_LEADER',
  BAD_EXPIRATION_TIME = 'BAD_EXPIRATION_TIME',
  BAD_SCHEMA_HASH = 'BAD_SCHEMA_HASH',
  DUPLICATE_PEER_ID = 'DUPLICATE_PEER_ID',
  GROUP_IS_FULL = 'GROUP_IS_FULL',
  NOT_LOOKING_FOR_GROUP = 'NOT_LOOKING_FOR_GROUP',
  PROTOCOL_VIOLATION = 'PROTOCOL_VIOLATION',
  INTERNAL_ERROR = 'INTERNAL_ERROR',
  CANCELLED = 'CANCELLED',
  GROUP_DISBANDED = 'GROUP_DISBANDED',
  BAD_GROUP_KEY = 'BAD_GROUP_KEY',
  NEXT_WAVE = 'NEXT_WAVE'
}

enum __MatchCodeValues {
  NO_CODE = 0,
  ACCEPTED = 2,
  BEGIN_ALLREDUCE = 3,
  NOT_DECLARED = 6,
  NOT_A_LEADER = 7,
  BAD_EXPIRATION_TIME = 8,
  BAD_SCHEMA_HASH = 9,
  DUPLICATE_PEER_ID = 11,
  GROUP_IS_FULL = 12,
  NOT_LOOKING_FOR_GROUP = 13,
  PROTOCOL_VIOLATION = 14,
  INTERNAL_ERROR = 15,
  CANCELLED = 16,
  GROUP_DISBANDED = 17,
  BAD_GROUP_KEY = 18,
  NEXT_WAVE = 19
}

export namespace MatchCode {
  export const codec = (): Codec<MatchCode> => {
    return enumeration<MatchCode>(__MatchCodeValues)
  }
}

export interface JoinRequest {
  schemaHash: Uint8Array
  expiration: number
  groupKey: string
  info?: PeerInfo
  bringing: number
  acceptsPartial: boolean
  confirms: boolean
  averagedAgo: number
}

export namespace JoinRequest {
  let _codec: Codec<JoinRequest>

  export const codec = (): Codec<JoinRequest> => {
    if (_codec == null) {
      _codec = message<JoinRequest>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.schemaHash != null && obj.schemaHash.byteLength > 0)) {
          w.uint32(10)
          w.bytes(obj.schemaHash)
        }

        if ((obj.expiration != null && obj.expiration !== 0)) {
          w.uint32(17)
          w.double(obj.expiration)
        }

        if ((obj.groupKey != null && obj.groupKey !== '')) {
          w.uint32(26)
          w.string(obj.groupKey)
        }

        if (obj.info != null) {
          w.uint32(34)
          PeerInfo.codec().encode(obj.info, w)
        }

        if ((obj.bringing != null && obj.bringing !== 0)) {
          w.uint32(40)
          w.uint32(obj.bringing)
        }

        if ((obj.acceptsPartial != null && obj.acceptsPartial !== false)) {
          w.uint32(48)
          w.bool(obj.acceptsPartial)
        }

        if ((obj.confirms != null && obj.confirms !== false)) {
          w.uint32(56)
          w.bool(obj.confirms)
        }

        if ((obj.averagedAgo != null && obj.averagedAgo !== 0)) {
          w.uint32(65)
          w.double(obj.averagedAgo)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          schemaHash: uint8ArrayAlloc(0),
          expiration: 0,
          groupKey: '',
          bringing: 0,
          acceptsPartial: false,
          confirms: false,
          averagedAgo: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.schemaHash = reader.bytes()
              break
            }
            case 2: {
              obj.expiration = reader.double()
              break
            }
            case 3: {
              obj.groupKey = reader.string()
              break
            }
            case 4: {
              obj.info = PeerInfo.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.info
              })
              break
            }
            case 5: {
              obj.bringing = reader.uint32()
              break
            }
            case 6: {
              obj.acceptsPartial = reader.bool()
              break
            }
            case 7: {
              obj.confirms = reader.bool()
              break
            }
            case 8: {
              obj.averagedAgo = reader.double()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.schemaHash`,
                value: reader.bytes()
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.expiration`,
                value: reader.double()
              }
              break
            }
            case 3: {
              yield {
                field: `${prefix}.groupKey`,
                value: reader.string()
              }
              break
            }
            case 4: {
              yield * PeerInfo.codec().stream(reader, reader.uint32(), `${prefix}.info`, {
                limits: opts.limits?.info
              })

              break
            }
            case 5: {
              yield {
                field: `${prefix}.bringing`,
                value: reader.uint32()
              }
              break
            }
            case 6: {
              yield {
                field: `${prefix}.acceptsPartial`,
                value: reader.bool()
              }
              break
            }
            case 7: {
              yield {
                field: `${prefix}.confirms`,
                value: reader.bool()
              }
              break
            }
            case 8: {
              yield {
                field: `${prefix}.averagedAgo`,
                value: reader.double()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface JoinRequestSchemaHashFieldEvent {
    field: '$.schemaHash'
    value: Uint8Array
  }

  export interface JoinRequestExpirationFieldEvent {
    field: '$.expiration'
    value: number
  }

  export interface JoinRequestGroupKeyFieldEvent {
    field: '$.groupKey'
    value: string
  }

  export interface JoinRequestInfoModeFieldEvent {
    field: '$.info.mode'
    value: PeerMode
  }

  export interface JoinRequestInfoBandwidthFieldEvent {
    field: '$.info.bandwidth'
    value: number
  }

  export interface JoinRequestInfoWeightFieldEvent {
    field: '$.info.weight'
    value: number
  }

  export interface JoinRequestInfoUserDataFieldEvent {
    field: '$.info.userData'
    value: Uint8Array
  }

  export interface JoinRequestInfoDataPortFieldEvent {
    field: '$.info.dataPort'
    value: number
  }

  export interface JoinRequestInfoAddrsFieldEvent {
    field: '$.info.addrs[]'
    index: number
    value: Uint8Array
  }

  export interface JoinRequestInfoRoundFieldEvent {
    field: '$.info.round'
    value: number
  }

  export interface JoinRequestInfoSecondsNoneFieldEvent {
    field: '$.info.secondsNone'
    value: number
  }

  export interface JoinRequestInfoSecondsFloat16FieldEvent {
    field: '$.info.secondsFloat16'
    value: number
  }

  export interface JoinRequestInfoDataAddrsFieldEvent {
    field: '$.info.dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export interface JoinRequestInfoBandwidthMeasuredFieldEvent {
    field: '$.info.bandwidthMeasured'
    value: boolean
  }

  export interface JoinRequestInfoBaseFieldEvent {
    field: '$.info.base'
    value: Uint8Array
  }

  export interface JoinRequestInfoOuterStateFieldEvent {
    field: '$.info.outerState'
    value: Uint8Array
  }

  export interface JoinRequestBringingFieldEvent {
    field: '$.bringing'
    value: number
  }

  export interface JoinRequestAcceptsPartialFieldEvent {
    field: '$.acceptsPartial'
    value: boolean
  }

  export interface JoinRequestConfirmsFieldEvent {
    field: '$.confirms'
    value: boolean
  }

  export interface JoinRequestAveragedAgoFieldEvent {
    field: '$.averagedAgo'
    value: number
  }

  export function encode (obj: Partial<JoinRequest>): Uint8Array {
    return encodeMessage(obj, JoinRequest.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<JoinRequest>): JoinRequest {
    return decodeMessage(buf, JoinRequest.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<JoinRequest>): Generator<JoinRequestSchemaHashFieldEvent | JoinRequestExpirationFieldEvent | JoinRequestGroupKeyFieldEvent | JoinRequestInfoModeFieldEvent | JoinRequestInfoBandwidthFieldEvent | JoinRequestInfoWeightFieldEvent | JoinRequestInfoUserDataFieldEvent | JoinRequestInfoDataPortFieldEvent | JoinRequestInfoAddrsFieldEvent | JoinRequestInfoRoundFieldEvent | JoinRequestInfoSecondsNoneFieldEvent | JoinRequestInfoSecondsFloat16FieldEvent | JoinRequestInfoDataAddrsFieldEvent | JoinRequestInfoBandwidthMeasuredFieldEvent | JoinRequestInfoBaseFieldEvent | JoinRequestInfoOuterStateFieldEvent | JoinRequestBringingFieldEvent | JoinRequestAcceptsPartialFieldEvent | JoinRequestConfirmsFieldEvent | JoinRequestAveragedAgoFieldEvent> {
    return streamMessage(buf, JoinRequest.codec(), opts)
  }
}

export interface JoinConfirm {
  following: boolean
}

export namespace JoinConfirm {
  let _codec: Codec<JoinConfirm>

  export const codec = (): Codec<JoinConfirm> => {
    if (_codec == null) {
      _codec = message<JoinConfirm>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.following != null && obj.following !== false)) {
          w.uint32(8)
          w.bool(obj.following)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          following: false
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.following = reader.bool()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.following`,
                value: reader.bool()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface JoinConfirmFollowingFieldEvent {
    field: '$.following'
    value: boolean
  }

  export function encode (obj: Partial<JoinConfirm>): Uint8Array {
    return encodeMessage(obj, JoinConfirm.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<JoinConfirm>): JoinConfirm {
    return decodeMessage(buf, JoinConfirm.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<JoinConfirm>): Generator<JoinConfirmFollowingFieldEvent> {
    return streamMessage(buf, JoinConfirm.codec(), opts)
  }
}

export interface MessageFromLeader {
  code: MatchCode
  groupId: Uint8Array
  orderedPeerIds: Uint8Array[]
  gathered: PeerInfo[]
  suggestedLeader: Uint8Array
  reason: string
  arrivalDelays: number[]
  gridKey: string
  leaderKey: string
  noRoomFor: number
  stoppedLooking: number
  confirmWanted: boolean
}

export namespace MessageFromLeader {
  let _codec: Codec<MessageFromLeader>

  export const codec = (): Codec<MessageFromLeader> => {
    if (_codec == null) {
      _codec = message<MessageFromLeader>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if (obj.code != null && __MatchCodeValues[obj.code] !== 0) {
          w.uint32(8)
          MatchCode.codec().encode(obj.code, w)
        }

        if ((obj.groupId != null && obj.groupId.byteLength > 0)) {
          w.uint32(18)
          w.bytes(obj.groupId)
        }

        if (obj.orderedPeerIds != null && obj.orderedPeerIds.length > 0) {
          for (const value of obj.orderedPeerIds) {
            w.uint32(26)
            w.bytes(value)
          }
        }

        if (obj.gathered != null && obj.gathered.length > 0) {
          for (const value of obj.gathered) {
            w.uint32(34)
            PeerInfo.codec().encode(value, w)
          }
        }

        if ((obj.suggestedLeader != null && obj.suggestedLeader.byteLength > 0)) {
          w.uint32(42)
          w.bytes(obj.suggestedLeader)
        }

        if ((obj.reason != null && obj.reason !== '')) {
          w.uint32(50)
          w.string(obj.reason)
        }

        if (obj.arrivalDelays != null && obj.arrivalDelays.length > 0) {
          for (const value of obj.arrivalDelays) {
            w.uint32(61)
            w.float(value)
          }
        }

        if ((obj.gridKey != null && obj.gridKey !== '')) {
          w.uint32(66)
          w.string(obj.gridKey)
        }

        if ((obj.leaderKey != null && obj.leaderKey !== '')) {
          w.uint32(74)
          w.string(obj.leaderKey)
        }

        if ((obj.noRoomFor != null && obj.noRoomFor !== 0)) {
          w.uint32(80)
          w.uint32(obj.noRoomFor)
        }

        if ((obj.stoppedLooking != null && obj.stoppedLooking !== 0)) {
          w.uint32(93)
          w.float(obj.stoppedLooking)
        }

        if ((obj.confirmWanted != null && obj.confirmWanted !== false)) {
          w.uint32(96)
          w.bool(obj.confirmWanted)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          code: MatchCode.NO_CODE,
          groupId: uint8ArrayAlloc(0),
          orderedPeerIds: [],
          gathered: [],
          suggestedLeader: uint8ArrayAlloc(0),
          reason: '',
          arrivalDelays: [],
          gridKey: '',
          leaderKey: '',
          noRoomFor: 0,
          stoppedLooking: 0,
          confirmWanted: false
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.code = MatchCode.codec().decode(reader)
              break
            }
            case 2: {
              obj.groupId = reader.bytes()
              break
            }
            case 3: {
              if (opts.limits?.orderedPeerIds != null && obj.orderedPeerIds.length === opts.limits.orderedPeerIds) {
                throw new MaxLengthError('Decode error - repeated field "orderedPeerIds" had too many elements')
              }

              obj.orderedPeerIds.push(reader.bytes())
              break
            }
            case 4: {
              if (opts.limits?.gathered != null && obj.gathered.length === opts.limits.gathered) {
                throw new MaxLengthError('Decode error - repeated field "gathered" had too many elements')
              }

              obj.gathered.push(PeerInfo.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.gathered$
              }))
              break
            }
            case 5: {
              obj.suggestedLeader = reader.bytes()
              break
            }
            case 6: {
              obj.reason = reader.string()
              break
            }
            case 7: {
              if (opts.limits?.arrivalDelays != null && obj.arrivalDelays.length === opts.limits.arrivalDelays) {
                throw new MaxLengthError('Decode error - repeated field "arrivalDelays" had too many elements')
              }

              obj.arrivalDelays.push(reader.float())
              break
            }
            case 8: {
              obj.gridKey = reader.string()
              break
            }
            case 9: {
              obj.leaderKey = reader.string()
              break
            }
            case 10: {
              obj.noRoomFor = reader.uint32()
              break
            }
            case 11: {
              obj.stoppedLooking = reader.float()
              break
            }
            case 12: {
              obj.confirmWanted = reader.bool()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          orderedPeerIds: 0,
          gathered: 0,
          arrivalDelays: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.code`,
                value: MatchCode.codec().decode(reader)
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.groupId`,
                value: reader.bytes()
              }
              break
            }
            case 3: {
              if (opts.limits?.orderedPeerIds != null && obj.orderedPeerIds === opts.limits.orderedPeerIds) {
                throw new MaxLengthError('Streaming decode error - repeated field "orderedPeerIds" had too many elements')
              }

              yield {
                field: `${prefix}.orderedPeerIds[]`,
                index: obj.orderedPeerIds,
                value: reader.bytes()
              }

              obj.orderedPeerIds++

              break
            }
            case 4: {
              if (opts.limits?.gathered != null && obj.gathered === opts.limits.gathered) {
                throw new MaxLengthError('Streaming decode error - repeated field "gathered" had too many elements')
              }

              for (const evt of PeerInfo.codec().stream(reader, reader.uint32(), `${prefix}.gathered[]`, {
                limits: opts.limits?.gathered$
              })) {
                yield {
                  ...evt,
                  index: obj.gathered
                }
              }

              obj.gathered++

              break
            }
            case 5: {
              yield {
                field: `${prefix}.suggestedLeader`,
                value: reader.bytes()
              }
              break
            }
            case 6: {
              yield {
                field: `${prefix}.reason`,
                value: reader.string()
              }
              break
            }
            case 7: {
              if (opts.limits?.arrivalDelays != null && obj.arrivalDelays === opts.limits.arrivalDelays) {
                throw new MaxLengthError('Streaming decode error - repeated field "arrivalDelays" had too many elements')
              }

              yield {
                field: `${prefix}.arrivalDelays[]`,
                index: obj.arrivalDelays,
                value: reader.float()
              }

              obj.arrivalDelays++

              break
            }
            case 8: {
              yield {
                field: `${prefix}.gridKey`,
                value: reader.string()
              }
              break
            }
            case 9: {
              yield {
                field: `${prefix}.leaderKey`,
                value: reader.string()
              }
              break
            }
            case 10: {
              yield {
                field: `${prefix}.noRoomFor`,
                value: reader.uint32()
              }
              break
            }
            case 11: {
              yield {
                field: `${prefix}.stoppedLooking`,
                value: reader.float()
              }
              break
            }
            case 12: {
              yield {
                field: `${prefix}.confirmWanted`,
                value: reader.bool()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface MessageFromLeaderCodeFieldEvent {
    field: '$.code'
    value: MatchCode
  }

  export interface MessageFromLeaderGroupIdFieldEvent {
    field: '$.groupId'
    value: Uint8Array
  }

  export interface MessageFromLeaderOrderedPeerIdsFieldEvent {
    field: '$.orderedPeerIds[]'
    index: number
    value: Uint8Array
  }

  export interface MessageFromLeaderGatheredModeFieldEvent {
    field: '$.gathered[].mode'
    value: PeerMode
    index: number
  }

  export interface MessageFromLeaderGatheredBandwidthFieldEvent {
    field: '$.gathered[].bandwidth'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredWeightFieldEvent {
    field: '$.gathered[].weight'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredUserDataFieldEvent {
    field: '$.gathered[].userData'
    value: Uint8Array
    index: number
  }

  export interface MessageFromLeaderGatheredDataPortFieldEvent {
    field: '$.gathered[].dataPort'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredAddrsFieldEvent {
    field: '$.gathered[].addrs[]'
    index: number
    value: Uint8Array
  }

  export interface MessageFromLeaderGatheredRoundFieldEvent {
    field: '$.gathered[].round'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredSecondsNoneFieldEvent {
    field: '$.gathered[].secondsNone'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredSecondsFloat16FieldEvent {
    field: '$.gathered[].secondsFloat16'
    value: number
    index: number
  }

  export interface MessageFromLeaderGatheredDataAddrsFieldEvent {
    field: '$.gathered[].dataAddrs[]'
    index: number
    value: Uint8Array
  }

  export interface MessageFromLeaderGatheredBandwidthMeasuredFieldEvent {
    field: '$.gathered[].bandwidthMeasured'
    value: boolean
    index: number
  }

  export interface MessageFromLeaderGatheredBaseFieldEvent {
    field: '$.gathered[].base'
    value: Uint8Array
    index: number
  }

  export interface MessageFromLeaderGatheredOuterStateFieldEvent {
    field: '$.gathered[].outerState'
    value: Uint8Array
    index: number
  }

  export interface MessageFromLeaderSuggestedLeaderFieldEvent {
    field: '$.suggestedLeader'
    value: Uint8Array
  }

  export interface MessageFromLeaderReasonFieldEvent {
    field: '$.reason'
    value: string
  }

  export interface MessageFromLeaderArrivalDelaysFieldEvent {
    field: '$.arrivalDelays[]'
    index: number
    value: number
  }

  export interface MessageFromLeaderGridKeyFieldEvent {
    field: '$.gridKey'
    value: string
  }

  export interface MessageFromLeaderLeaderKeyFieldEvent {
    field: '$.leaderKey'
    value: string
  }

  export interface MessageFromLeaderNoRoomForFieldEvent {
    field: '$.noRoomFor'
    value: number
  }

  export interface MessageFromLeaderStoppedLookingFieldEvent {
    field: '$.stoppedLooking'
    value: number
  }

  export interface MessageFromLeaderConfirmWantedFieldEvent {
    field: '$.confirmWanted'
    value: boolean
  }

  export function encode (obj: Partial<MessageFromLeader>): Uint8Array {
    return encodeMessage(obj, MessageFromLeader.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<MessageFromLeader>): MessageFromLeader {
    return decodeMessage(buf, MessageFromLeader.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<MessageFromLeader>): Generator<MessageFromLeaderCodeFieldEvent | MessageFromLeaderGroupIdFieldEvent | MessageFromLeaderOrderedPeerIdsFieldEvent | MessageFromLeaderGatheredModeFieldEvent | MessageFromLeaderGatheredBandwidthFieldEvent | MessageFromLeaderGatheredWeightFieldEvent | MessageFromLeaderGatheredUserDataFieldEvent | MessageFromLeaderGatheredDataPortFieldEvent | MessageFromLeaderGatheredAddrsFieldEvent | MessageFromLeaderGatheredRoundFieldEvent | MessageFromLeaderGatheredSecondsNoneFieldEvent | MessageFromLeaderGatheredSecondsFloat16FieldEvent | MessageFromLeaderGatheredDataAddrsFieldEvent | MessageFromLeaderGatheredBandwidthMeasuredFieldEvent | MessageFromLeaderGatheredBaseFieldEvent | MessageFromLeaderGatheredOuterStateFieldEvent | MessageFromLeaderSuggestedLeaderFieldEvent | MessageFromLeaderReasonFieldEvent | MessageFromLeaderArrivalDelaysFieldEvent | MessageFromLeaderGridKeyFieldEvent | MessageFromLeaderLeaderKeyFieldEvent | MessageFromLeaderNoRoomForFieldEvent | MessageFromLeaderStoppedLookingFieldEvent | MessageFromLeaderConfirmWantedFieldEvent> {
    return streamMessage(buf, MessageFromLeader.codec(), opts)
  }
}

export enum Compression {
  NONE = 'NONE',
  FLOAT16 = 'FLOAT16',
  UNIFORM_8BIT = 'UNIFORM_8BIT',
  BLOCKWISE_8BIT = 'BLOCKWISE_8BIT'
}

enum __CompressionValues {
  NONE = 0,
  FLOAT16 = 1,
  UNIFORM_8BIT = 2,
  BLOCKWISE_8BIT = 3
}

export namespace Compression {
  export const codec = (): Codec<Compression> => {
    return enumeration<Compression>(__CompressionValues)
  }
}

export interface AggregateHeader {
  groupId: Uint8Array
  repairOf: Uint8Array
}

export namespace AggregateHeader {
  let _codec: Codec<AggregateHeader>

  export const codec = (): Codec<AggregateHeader> => {
    if (_codec == null) {
      _codec = message<AggregateHeader>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.groupId != null && obj.groupId.byteLength > 0)) {
          w.uint32(10)
          w.bytes(obj.groupId)
        }

        if ((obj.repairOf != null && obj.repairOf.byteLength > 0)) {
          w.uint32(18)
          w.bytes(obj.repairOf)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          groupId: uint8ArrayAlloc(0),
          repairOf: uint8ArrayAlloc(0)
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.groupId = reader.bytes()
              break
            }
            case 2: {
              obj.repairOf = reader.bytes()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.groupId`,
                value: reader.bytes()
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.repairOf`,
                value: reader.bytes()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface AggregateHeaderGroupIdFieldEvent {
    field: '$.groupId'
    value: Uint8Array
  }

  export interface AggregateHeaderRepairOfFieldEvent {
    field: '$.repairOf'
    value: Uint8Array
  }

  export function encode (obj: Partial<AggregateHeader>): Uint8Array {
    return encodeMessage(obj, AggregateHeader.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<AggregateHeader>): AggregateHeader {
    return decodeMessage(buf, AggregateHeader.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<AggregateHeader>): Generator<AggregateHeaderGroupIdFieldEvent | AggregateHeaderRepairOfFieldEvent> {
    return streamMessage(buf, AggregateHeader.codec(), opts)
  }
}

export interface TensorPart {
  partIndex: number
  compression: Compression
  data: Uint8Array
  handedOff: boolean
}

export namespace TensorPart {
  let _codec: Codec<TensorPart>

  export const codec = (): Codec<TensorPart> => {
    if (_codec == null) {
      _codec = message<TensorPart>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.partIndex != null && obj.partIndex !== 0)) {
          w.uint32(8)
          w.uint32(obj.partIndex)
        }

        if (obj.compression != null && __CompressionValues[obj.compression] !== 0) {
          w.uint32(16)
          Compression.codec().encode(obj.compression, w)
        }

        if ((obj.data != null && obj.data.byteLength > 0)) {
          w.uint32(26)
          w.bytes(obj.data)
        }

        if ((obj.handedOff != null && obj.handedOff !== false)) {
          w.uint32(32)
          w.bool(obj.handedOff)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          partIndex: 0,
          compression: Compression.NONE,
          data: uint8ArrayAlloc(0),
          handedOff: false
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.partIndex = reader.uint32()
              break
            }
            case 2: {
              obj.compression = Compression.codec().decode(reader)
              break
            }
            case 3: {
              obj.data = reader.bytes()
              break
            }
            case 4: {
              obj.handedOff = reader.bool()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.partIndex`,
                value: reader.uint32()
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.compression`,
                value: Compression.codec().decode(reader)
              }
              break
            }
            case 3: {
              yield {
                field: `${prefix}.data`,
                value: reader.bytes()
              }
              break
            }
            case 4: {
              yield {
                field: `${prefix}.handedOff`,
                value: reader.bool()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface TensorPartPartIndexFieldEvent {
    field: '$.partIndex'
    value: number
  }

  export interface TensorPartCompressionFieldEvent {
    field: '$.compression'
    value: Compression
  }

  export interface TensorPartDataFieldEvent {
    field: '$.data'
    value: Uint8Array
  }

  export interface TensorPartHandedOffFieldEvent {
    field: '$.handedOff'
    value: boolean
  }

  export function encode (obj: Partial<TensorPart>): Uint8Array {
    return encodeMessage(obj, TensorPart.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<TensorPart>): TensorPart {
    return decodeMessage(buf, TensorPart.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<TensorPart>): Generator<TensorPartPartIndexFieldEvent | TensorPartCompressionFieldEvent | TensorPartDataFieldEvent | TensorPartHandedOffFieldEvent> {
    return streamMessage(buf, TensorPart.codec(), opts)
  }
}

export interface AggregateReply {
  code: MatchCode
  reason: string
}

export namespace AggregateReply {
  let _codec: Codec<AggregateReply>

  export const codec = (): Codec<AggregateReply> => {
    if (_codec == null) {
      _codec = message<AggregateReply>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if (obj.code != null && __MatchCodeValues[obj.code] !== 0) {
          w.uint32(8)
          MatchCode.codec().encode(obj.code, w)
        }

        if ((obj.reason != null && obj.reason !== '')) {
          w.uint32(18)
          w.string(obj.reason)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          code: MatchCode.NO_CODE,
          reason: ''
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.code = MatchCode.codec().decode(reader)
              break
            }
            case 2: {
              obj.reason = reader.string()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.code`,
                value: MatchCode.codec().decode(reader)
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.reason`,
                value: reader.string()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface AggregateReplyCodeFieldEvent {
    field: '$.code'
    value: MatchCode
  }

  export interface AggregateReplyReasonFieldEvent {
    field: '$.reason'
    value: string
  }

  export function encode (obj: Partial<AggregateReply>): Uint8Array {
    return encodeMessage(obj, AggregateReply.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<AggregateReply>): AggregateReply {
    return decodeMessage(buf, AggregateReply.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<AggregateReply>): Generator<AggregateReplyCodeFieldEvent | AggregateReplyReasonFieldEvent> {
    return streamMessage(buf, AggregateReply.codec(), opts)
  }
}

export interface StateRequest {}

export namespace StateRequest {
  let _codec: Codec<StateRequest>

  export const codec = (): Codec<StateRequest> => {
    if (_codec == null) {
      _codec = message<StateRequest>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {}

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export function encode (obj: Partial<StateRequest>): Uint8Array {
    return encodeMessage(obj, StateRequest.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateRequest>): StateRequest {
    return decodeMessage(buf, StateRequest.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateRequest>): Generator<{}> {
    return streamMessage(buf, StateRequest.codec(), opts)
  }
}

export interface StateHeader {
  metadata: Uint8Array
  tensors: TensorMeta[]
  busy: boolean
}

export namespace StateHeader {
  let _codec: Codec<StateHeader>

  export const codec = (): Codec<StateHeader> => {
    if (_codec == null) {
      _codec = message<StateHeader>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.metadata != null && obj.metadata.byteLength > 0)) {
          w.uint32(10)
          w.bytes(obj.metadata)
        }

        if (obj.tensors != null && obj.tensors.length > 0) {
          for (const value of obj.tensors) {
            w.uint32(18)
            TensorMeta.codec().encode(value, w)
          }
        }

        if ((obj.busy != null && obj.busy !== false)) {
          w.uint32(24)
          w.bool(obj.busy)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          metadata: uint8ArrayAlloc(0),
          tensors: [],
          busy: false
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.metadata = reader.bytes()
              break
            }
            case 2: {
              if (opts.limits?.tensors != null && obj.tensors.length === opts.limits.tensors) {
                throw new MaxLengthError('Decode error - repeated field "tensors" had too many elements')
              }

              obj.tensors.push(TensorMeta.codec().decode(reader, reader.uint32(), {
                limits: opts.limits?.tensors$
              }))
              break
            }
            case 3: {
              obj.busy = reader.bool()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          tensors: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.metadata`,
                value: reader.bytes()
              }
              break
            }
            case 2: {
              if (opts.limits?.tensors != null && obj.tensors === opts.limits.tensors) {
                throw new MaxLengthError('Streaming decode error - repeated field "tensors" had too many elements')
              }

              for (const evt of TensorMeta.codec().stream(reader, reader.uint32(), `${prefix}.tensors[]`, {
                limits: opts.limits?.tensors$
              })) {
                yield {
                  ...evt,
                  index: obj.tensors
                }
              }

              obj.tensors++

              break
            }
            case 3: {
              yield {
                field: `${prefix}.busy`,
                value: reader.bool()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface StateHeaderMetadataFieldEvent {
    field: '$.metadata'
    value: Uint8Array
  }

  export interface StateHeaderTensorsNameFieldEvent {
    field: '$.tensors[].name'
    value: string
    index: number
  }

  export interface StateHeaderTensorsShapeFieldEvent {
    field: '$.tensors[].shape[]'
    index: number
    value: number
  }

  export interface StateHeaderBusyFieldEvent {
    field: '$.busy'
    value: boolean
  }

  export function encode (obj: Partial<StateHeader>): Uint8Array {
    return encodeMessage(obj, StateHeader.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateHeader>): StateHeader {
    return decodeMessage(buf, StateHeader.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateHeader>): Generator<StateHeaderMetadataFieldEvent | StateHeaderTensorsNameFieldEvent | StateHeaderTensorsShapeFieldEvent | StateHeaderBusyFieldEvent> {
    return streamMessage(buf, StateHeader.codec(), opts)
  }
}

export interface TensorMeta {
  name: string
  shape: number[]
}

export namespace TensorMeta {
  let _codec: Codec<TensorMeta>

  export const codec = (): Codec<TensorMeta> => {
    if (_codec == null) {
      _codec = message<TensorMeta>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.name != null && obj.name !== '')) {
          w.uint32(10)
          w.string(obj.name)
        }

        if (obj.shape != null && obj.shape.length > 0) {
          for (const value of obj.shape) {
            w.uint32(16)
            w.uint32(value)
          }
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          name: '',
          shape: []
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.name = reader.string()
              break
            }
            case 2: {
              if (opts.limits?.shape != null && obj.shape.length === opts.limits.shape) {
                throw new MaxLengthError('Decode error - repeated field "shape" had too many elements')
              }

              obj.shape.push(reader.uint32())
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const obj = {
          shape: 0
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.name`,
                value: reader.string()
              }
              break
            }
            case 2: {
              if (opts.limits?.shape != null && obj.shape === opts.limits.shape) {
                throw new MaxLengthError('Streaming decode error - repeated field "shape" had too many elements')
              }

              yield {
                field: `${prefix}.shape[]`,
                index: obj.shape,
                value: reader.uint32()
              }

              obj.shape++

              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface TensorMetaNameFieldEvent {
    field: '$.name'
    value: string
  }

  export interface TensorMetaShapeFieldEvent {
    field: '$.shape[]'
    index: number
    value: number
  }

  export function encode (obj: Partial<TensorMeta>): Uint8Array {
    return encodeMessage(obj, TensorMeta.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<TensorMeta>): TensorMeta {
    return decodeMessage(buf, TensorMeta.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<TensorMeta>): Generator<TensorMetaNameFieldEvent | TensorMetaShapeFieldEvent> {
    return streamMessage(buf, TensorMeta.codec(), opts)
  }
}

export interface StateChunk {
  tensorIndex: number
  offset: number
  data: Uint8Array
}

export namespace StateChunk {
  let _codec: Codec<StateChunk>

  export const codec = (): Codec<StateChunk> => {
    if (_codec == null) {
      _codec = message<StateChunk>((obj, w, opts = {}) => {
        if (opts.lengthDelimited !== false) {
          w.fork()
        }

        if ((obj.tensorIndex != null && obj.tensorIndex !== 0)) {
          w.uint32(8)
          w.uint32(obj.tensorIndex)
        }

        if ((obj.offset != null && obj.offset !== 0)) {
          w.uint32(16)
          w.uint32(obj.offset)
        }

        if ((obj.data != null && obj.data.byteLength > 0)) {
          w.uint32(26)
          w.bytes(obj.data)
        }

        if (opts.lengthDelimited !== false) {
          w.ldelim()
        }
      }, (reader, length, opts = {}) => {
        const obj: any = {
          tensorIndex: 0,
          offset: 0,
          data: uint8ArrayAlloc(0)
        }

        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              obj.tensorIndex = reader.uint32()
              break
            }
            case 2: {
              obj.offset = reader.uint32()
              break
            }
            case 3: {
              obj.data = reader.bytes()
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }

        return obj
      }, function * (reader, length, prefix, opts = {}) {
        const end = length == null ? reader.len : reader.pos + length

        while (reader.pos < end) {
          const tag = reader.uint32()

          switch (tag >>> 3) {
            case 1: {
              yield {
                field: `${prefix}.tensorIndex`,
                value: reader.uint32()
              }
              break
            }
            case 2: {
              yield {
                field: `${prefix}.offset`,
                value: reader.uint32()
              }
              break
            }
            case 3: {
              yield {
                field: `${prefix}.data`,
                value: reader.bytes()
              }
              break
            }
            default: {
              reader.skipType(tag & 7)
              break
            }
          }
        }
      })
    }

    return _codec
  }

  export interface StateChunkTensorIndexFieldEvent {
    field: '$.tensorIndex'
    value: number
  }

  export interface StateChunkOffsetFieldEvent {
    field: '$.offset'
    value: number
  }

  export interface StateChunkDataFieldEvent {
    field: '$.data'
    value: Uint8Array
  }

  export function encode (obj: Partial<StateChunk>): Uint8Array {
    return encodeMessage(obj, StateChunk.codec())
  }

  export function decode (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateChunk>): StateChunk {
    return decodeMessage(buf, StateChunk.codec(), opts)
  }

  export function stream (buf: Uint8Array | Uint8ArrayList, opts?: DecodeOptions<StateChunk>): Generator<StateChunkTensorIndexFieldEvent | StateChunkOffsetFieldEvent | StateChunkDataFieldEvent> {
    return streamMessage(buf, StateChunk.codec(), opts)
  }
}
