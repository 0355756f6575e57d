<?php

declare(strict_types=1);

namespace Baton;

// Baton\LockHeldException is the name CLIENTS.md gives the exception; the class
// lives in Baton\Exception with the others. Loading the class registers the
// alias (see the end of Exception/LockHeldException.php), so that both
// `catch (Baton\LockHeldException $e)` and `catch (Baton\Exception\LockHeldException $e)`
// catch it: a catch clause never autoloads, and the class is always loaded by
// the time one is thrown. This file only lets an autoloader find the alias by
// its own name.
class_exists(Exception\LockHeldException::class);
