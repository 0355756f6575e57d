<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * LimitMismatchException: a shared hold asked for another limit than the lock's
 * shared holds have (`409 limit-mismatch`). `limit()` is the lock's.
 */
class LimitMismatchException extends BatonException
{
    /**
     * The limit the lock's shared holds were granted under; null for none.
     */
    public function limit(): ?int
    {
        $limit = $this->problem['limit'] ?? null;

        return is_int($limit) ? $limit : null;
    }
}
